"""Transactional messages: half send, commit and rollback, and the check-back offers.

RocketMQ's design (``TransactionalMessageServiceImpl``, ``EndTransactionProcessor``), with
the guard RocketMQ lacks: an end is idempotent. A second commit (or rollback) answers the
first outcome and stores nothing; a commit after a rollback, or the reverse, is refused; so
is an end by another producer group. This holds across restarts because the outcome is read
back from the CommitLog: the op record says how a half ended, and a commit whose op record a
crash lost is found by its copy in the real topic (the commit is put once per half, keyed by
the half's CommitLog offset through :meth:`services.idempotency.IdempotencyService.reput`).

Across a failover an end must be in the log of whichever broker is master next, or that
broker may end the transaction the other way (its check-back, an operator). An end is
therefore answered only once its op record survives a failover
(:attr:`TransactionService.survives_failover`: the cluster member's rule — an in-sync slave
acknowledged it, or the in-sync set this master published names no slave, so no other broker
may be elected). Otherwise (a sync master cut off from its slave and etcd) the end stays
recorded here — the same end retried writes its op record again and is answered once a
replica has it, the other way is refused — and is answered
:class:`~services.errors.TransactionEndUnreplicatedError`: nothing was decided, and a
successor that never saw it may end it either way.

Check-back (transport A of the reference): the :class:`~services.transaction.check.
TransactionCheckService` offers a due half to its producer group; a producer long-polls its
group's offers (:meth:`TransactionService.poll_checks`), each leased to one poller for a
while, and answers with a commit or a rollback (or nothing: it is asked again later).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from services.appender import PutMessages
from services.errors import (
    BrokerUnavailableError,
    ProducerGroupMismatchError,
    TransactionEndedError,
    TransactionEndUnreplicatedError,
    TransactionIdInUseError,
    TransactionNotFoundError,
)
from services.groups import check_group_name
from services.idempotency import IdempotencyService
from services.long_poll import WaiterRegistry, WakeReason
from services.metrics import Metrics
from services.outgoing import OutgoingMessage, deliver_time_of
from services.pull import AbandonFactory
from services.send import SendService
from services.topics import TopicService
from services.trace.tracer import Tracer
from services.transaction.halves import HalfAppender
from services.transaction.ops import DEFAULT_OP_MAX_SIZE, OpWriter
from services.transaction.records import (
    END_COMMIT,
    END_ROLLBACK,
    check_copy,
    check_max_copy,
    half_message,
    offered_properties,
    real_message,
)
from services.transaction.table import Transaction, TransactionState, TransactionTable, rebuild
from storage import Message, MessageStore, PutResult, PutStatus, StoredMessage
from storage.config_managers import TopicConfig
from storage.record.properties import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_ID,
)
from storage.timer.transform import redirect_timer
from storage.topic_names import TRANS_CHECK_MAX_TIME_TOPIC

CHECK_QUEUE: Final = -1
"""The waiter key of a producer group's check offers is (group, -1): no real queue."""
MAX_CHECK_IMMUNITY_S: Final = 3600  # RocketMQ 5's maxTransactionRecoverySecond


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """RocketMQ's ``BrokerConfig`` transaction settings (its defaults)."""

    timeout_ms: int = 6_000  # transactionTimeOut: no check before a half is this old
    check_interval_ms: int = 30_000  # transactionCheckInterval: between two checks
    check_max: int = 15  # transactionCheckMax: then the half goes to the check-max topic
    op_max_size: int = DEFAULT_OP_MAX_SIZE  # transactionOpMsgMaxSize: bytes of one op record


@dataclass(frozen=True, slots=True)
class Prepared:
    """A stored half message: what the producer needs to end its transaction."""

    transaction: Transaction
    half: PutResult


@dataclass(frozen=True, slots=True)
class Ended:
    """How a transaction ended; ``message``: where the committed message is, when committed
    (the record, or the put that stored it now)."""

    transaction: Transaction
    message: StoredMessage | PutResult | None
    repeated: bool  # an earlier end had already ended it so: nothing was stored


@dataclass(frozen=True, slots=True)
class CheckOffer:
    """A half whose producer group is asked how its transaction ended."""

    transaction: Transaction
    half: StoredMessage  # the original half, in the half topic, with its offered_properties
    leased_until_ms: int  # then another poller may take it


@dataclass(slots=True)
class _Offer:
    transaction: Transaction
    visible_at_ms: int = 0


class TransactionService:
    """Half messages, ends and check offers over one store (a master's)."""

    def __init__(
        self,
        store: MessageStore,
        put: PutMessages,
        send: SendService,
        idempotency: IdempotencyService,
        waiters: WaiterRegistry,
        metrics: Metrics,
        config: TransactionConfig,
        topics: TopicService,
        *,
        tracer: Tracer | None = None,
    ) -> None:
        self._tracer = tracer or Tracer.off()
        self._topics = topics
        self._store = store
        self._put = put
        self._send = send
        self._idempotency = idempotency
        self._waiters = waiters
        self._metrics = metrics
        self.config = config
        self.table = TransactionTable(config.timeout_ms)
        self.ops = OpWriter(put, config.op_max_size)
        self._halves = HalfAppender(put)
        self._offers: dict[str, dict[int, _Offer]] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._sent: dict[int, Message] = {}
        """Halves this process stored and has not begun to end, by half offset, as sent:
        nothing was put for them yet, so their end neither reads the half back nor looks
        for an earlier commit."""
        self.loaded = False
        self.changed: Callable[[int], None] = _no_listener  # tells the check service a due time
        self.survives_failover: Callable[[PutStatus], bool] = _outside_a_cluster
        """Whether an op record put with this status is in the log of whichever broker is
        master next (set by the cluster member)."""

    # ------------------------------------------------------------------ state

    def load(self) -> int:
        """Rebuild the table from the transaction topics (a worker thread, before serving
        as master); returns how many records were read."""
        table = TransactionTable(self.config.timeout_ms)
        read = rebuild(self._store, table)
        self.table = table
        self._offers.clear()
        self._sent.clear()
        self.loaded = True
        return read

    def _require_loaded(self) -> None:
        if not self.loaded:
            raise BrokerUnavailableError(
                "transactions are served by the group's master once it has started"
            )

    def transaction(self, transaction_id: str) -> Transaction:
        self._require_loaded()
        found = self.table.get(transaction_id)
        if found is None:
            raise TransactionNotFoundError(
                f"no transaction {transaction_id[:80]!r} on this broker (or it has expired)"
            )
        return found

    def _owned(self, transaction_id: str, producer_group: str) -> Transaction:
        """The transaction, when ``producer_group`` is its group (else
        ProducerGroupMismatchError)."""
        transaction = self.transaction(transaction_id)
        if transaction.producer_group != producer_group:
            raise ProducerGroupMismatchError(
                f"transaction {transaction_id} belongs to producer group "
                f"{transaction.producer_group!r}, not {producer_group!r}"
            )
        return transaction

    def unresolved(self, producer_group: str | None = None) -> list[Transaction]:
        """Open and given-up transactions, oldest first."""
        self._require_loaded()
        return [
            t
            for t in self.table.open_transactions()
            if producer_group is None or t.producer_group == producer_group
        ]

    # ------------------------------------------------------------------ half send

    async def prepare(
        self,
        topic: str,
        message: OutgoingMessage,
        producer_group: str,
        *,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        check_immunity_s: int | None = None,
    ) -> Prepared:
        """Store ``message`` as a half message of ``producer_group``: invisible in ``topic``
        until committed."""
        self._require_loaded()
        check_group_name(producer_group)
        built = await self._send.build(topic, message, born_host)
        self._check_timer(message, built)
        half = half_message(
            built,
            producer_group,
            deliver_at=message.deliver_at,
            deliver_after_ms=message.deliver_after_ms,
        )
        if check_immunity_s is not None:
            seconds = min(max(check_immunity_s, 0), MAX_CHECK_IMMUNITY_S)
            half.properties[PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS] = str(seconds)
        transaction_id = half.properties[PROPERTY_TRANSACTION_ID]
        if transaction_id in self.table.by_id:
            raise TransactionIdInUseError(
                f"UNIQ_KEY {transaction_id!r} is already the id of a transaction: leave "
                "UNIQ_KEY out of a transactional send, or give a new one"
            )
        result = await self._halves.put(half)
        transaction = self.table.add_prepared(half, result)
        self._sent[transaction.half_offset] = half
        self._metrics.transactions["prepared"] += 1
        self._trace("transaction_half", transaction, result.store_timestamp)
        self.changed(transaction.next_check_ms(self.config.check_interval_ms))
        return Prepared(transaction, result)

    def _check_timer(self, message: OutgoingMessage, built: Message) -> None:
        """Refuse at the half send a delivery time that the commit's put would refuse
        (timers off, too far ahead), so that a commit never fails for it. (A producer's own
        ``TRAN_TIMER_*`` property is refused with every reserved name, by the build.)"""
        now = now_ms()
        deliver = deliver_time_of(message, now)
        if deliver is not None:
            probe = dataclasses.replace(built, properties={PROPERTY_TIMER_DELIVER_MS: str(deliver)})
            redirect_timer(probe, now, self._store.config.timer)

    # ------------------------------------------------------------------ end

    async def end(self, transaction_id: str, producer_group: str, *, commit: bool) -> Ended:
        """Commit or roll back; idempotent (see the module docstring)."""
        transaction = self._owned(transaction_id, producer_group)
        offset = transaction.half_offset
        lock = self._locks.setdefault(offset, asyncio.Lock())
        try:
            async with lock:
                return await self._end(transaction, commit)
        finally:
            if not lock.locked() and self._locks.get(offset) is lock:
                del self._locks[offset]

    async def _end(self, transaction: Transaction, commit: bool) -> Ended:
        state = transaction.state
        if state.ended:
            committed = state is TransactionState.COMMITTED
            if committed != commit:
                raise _already_ended(transaction, "it cannot be ended the other way")
            if transaction.undecided:  # its op record again, answered once a replica has it
                await self._finish(transaction, committed=commit)
            return Ended(transaction, await self._committed_copy(transaction), repeated=True)
        sent = self._sent.pop(transaction.half_offset, None)
        if sent is not None:  # the first end of a half sent here: nothing to look for
            return await self._end_first(transaction, sent, commit)
        half = self._half(transaction)
        if not commit:
            earlier = await self._committed_copy(transaction, half)
            if earlier is not None:  # committed before a crash took its op record
                with contextlib.suppress(TransactionEndUnreplicatedError):
                    await self._finish(transaction, committed=True)
                raise _already_ended(transaction, "it cannot be ended the other way")
            await self._finish(transaction, committed=False)
            return Ended(transaction, None, repeated=False)
        if half is None:
            raise TransactionNotFoundError(
                f"the half message of transaction {transaction.transaction_id} has expired"
            )
        # Put once per half: a copy stored before a crash took its op record is found.
        real = real_message(half, transaction.commit_log_offset, transaction.store_timestamp)
        written = await self._idempotency.reput(real, half, since_ms=transaction.store_timestamp)
        await self._finish(transaction, committed=True)
        if written.earlier is not None:
            return Ended(transaction, written.earlier[0], repeated=True)
        return Ended(transaction, written.results[0], repeated=False)

    async def _end_first(self, transaction: Transaction, half: Message, commit: bool) -> Ended:
        if not commit:
            await self._finish(transaction, committed=False)
            return Ended(transaction, None, repeated=False)
        real = real_message(half, transaction.commit_log_offset, transaction.store_timestamp)
        results = await self._idempotency.reput_first(real, transaction.commit_log_offset)
        await self._finish(transaction, committed=True)
        return Ended(transaction, results[0], repeated=False)

    async def _finish(self, transaction: Transaction, *, committed: bool) -> None:
        """Write the op record, take the transaction out of the open ones, then require that
        the end survives a failover (else TransactionEndUnreplicatedError)."""
        status = await self.ops.end(
            transaction.half_offset, END_COMMIT if committed else END_ROLLBACK
        )
        if not transaction.state.ended:
            self.table.end(transaction.half_offset, committed)
            self._metrics.transactions["committed" if committed else "rolled_back"] += 1
            kind = "transaction_commit" if committed else "transaction_rollback"
            self._trace(kind, transaction)
            offers = self._offers.get(transaction.producer_group)
            if offers is not None:
                offers.pop(transaction.half_offset, None)
        self._require_decided(transaction, status)

    def _trace(
        self, kind: str, transaction: Transaction, at: int | None = None, **more: object
    ) -> None:
        """One step of ``transaction`` for its message's trace (nothing when not traced)."""
        if self._tracer.topic_on(transaction.topic):
            detail = {
                "transaction_id": transaction.transaction_id,
                "producer_group": transaction.producer_group,
                **more,
            }
            self._tracer.step(
                kind, transaction.topic, transaction.transaction_id, detail,
                queue_id=transaction.queue_id, at=at,
            )  # fmt: skip

    def _require_decided(self, transaction: Transaction, status: PutStatus) -> None:
        """Mark the end decided when its op record (put with ``status``) survives a
        failover; else leave it undecided and say so."""
        transaction.undecided = not self.survives_failover(status)
        if transaction.undecided:
            done = "commit" if transaction.state is TransactionState.COMMITTED else "rollback"
            raise TransactionEndUnreplicatedError(
                f"the {done} of transaction {transaction.transaction_id} is stored on this "
                f"master only ({status.value}): no broker that could succeed it has it yet. "
                f"Retry the {done}; it is answered once a replica has it"
            )

    def _half(self, transaction: Transaction) -> StoredMessage | None:
        return self._store.look_message_by_offset(transaction.commit_log_offset)

    async def _committed_copy(
        self, transaction: Transaction, half: StoredMessage | None = None
    ) -> StoredMessage | None:
        """The committed message of ``transaction`` in its real topic, if it has one; after
        an unclean exit, once the key index has caught up (a copy put before the crash is
        found only through it)."""
        half = half or self._half(transaction)
        if half is None:
            return None
        await self._idempotency.ready(None)
        return self._idempotency.find_reput(transaction.topic, half, transaction.store_timestamp)

    # ------------------------------------------------------------------ check-back

    async def check(self, transaction: Transaction) -> None:
        """One check-back round of an open transaction (the check service calls it when
        due): repair a commit whose op record was lost, give up after ``check_max``, or
        append a check copy and offer the half to its producer group."""
        ending = self._locks.get(transaction.half_offset)
        if not transaction.open or (ending is not None and ending.locked()):
            return  # ended, or being ended right now
        half = self._half(transaction)
        if half is not None and await self._committed_copy(transaction, half) is not None:
            with contextlib.suppress(TransactionEndUnreplicatedError):  # recorded here
                await self._finish(transaction, committed=True)
            return
        if transaction.checks >= self.config.check_max or half is None:
            await self._give_up(transaction, half)
            return
        checks = transaction.checks + 1
        copy = check_copy(half, transaction.half_offset, transaction.commit_log_offset, checks)
        result = (await self._put([copy]))[0]
        if not transaction.open:  # ended while the copy was written
            return
        transaction.checks = checks
        transaction.last_check_ms = result.store_timestamp
        self._metrics.transactions["checked"] += 1
        self._trace("transaction_checked", transaction, result.store_timestamp, checks=checks)
        offers = self._offers.setdefault(transaction.producer_group, {})
        offers[transaction.half_offset] = _Offer(transaction)
        self._waiters.notify(transaction.producer_group, CHECK_QUEUE, 0)

    async def _give_up(self, transaction: Transaction, half: StoredMessage | None) -> None:
        """RocketMQ's ``resolveDiscardMsg``: a copy in ``TRANS_CHECK_MAX_TIME_TOPIC``; no
        more checks. An operator may still commit or roll it back."""
        if half is not None:
            # RocketMQ creates it on demand, one queue, so operators can read it.
            await self._topics.ensure(TopicConfig(TRANS_CHECK_MAX_TIME_TOPIC, 1, 1))
            copy = check_max_copy(half, transaction.half_offset, transaction.commit_log_offset)
            await self._idempotency.reput(copy, half, since_ms=transaction.store_timestamp)
        self._sent.pop(transaction.half_offset, None)
        if transaction.open:
            self.table.give_up(transaction.half_offset)
            self._metrics.transactions["gave_up"] += 1
            self._trace("transaction_gave_up", transaction)
        offers = self._offers.get(transaction.producer_group)
        if offers is not None:
            offers.pop(transaction.half_offset, None)

    async def poll_checks(
        self,
        producer_group: str,
        *,
        max_checks: int,
        wait_ms: int,
        lease_ms: int,
        abandon: AbandonFactory | None = None,
        topic_allowed: Callable[[str], bool] | None = None,
    ) -> list[CheckOffer]:
        """The group's due checks, each leased to this poller for ``lease_ms`` (then offered
        again); waits up to ``wait_ms`` for one. ``topic_allowed``: only checks of the topics
        it allows."""
        self._require_loaded()
        check_group_name(producer_group)
        deadline = time.monotonic() + wait_ms / 1000
        watch: asyncio.Future[Any] | None = None
        try:
            while True:
                taken = self._take_offers(producer_group, max_checks, lease_ms, topic_allowed)
                remaining = deadline - time.monotonic()
                if taken or remaining <= 0:
                    return taken
                wake = self._next_visible_s(producer_group, topic_allowed)
                timeout = remaining if wake is None else min(remaining, wake)
                if watch is None and abandon is not None:
                    watch = asyncio.ensure_future(abandon())
                reason = await self._waiters.wait(
                    [(producer_group, CHECK_QUEUE)], timeout, abandon=watch
                )
                if reason in (WakeReason.SHUTDOWN, WakeReason.ABANDONED):
                    return []
        finally:
            if watch is not None and not watch.done():
                watch.cancel()

    def _take_offers(
        self,
        group: str,
        max_checks: int,
        lease_ms: int,
        topic_allowed: Callable[[str], bool] | None,
    ) -> list[CheckOffer]:
        offers = self._offers.get(group)
        if not offers:
            return []
        now = now_ms()
        taken: list[CheckOffer] = []
        for offset, offer in list(offers.items()):
            if len(taken) >= max_checks:
                break
            transaction = offer.transaction
            if not transaction.open:
                del offers[offset]
                continue
            if offer.visible_at_ms > now:
                continue
            if topic_allowed is not None and not topic_allowed(transaction.topic):
                continue
            half = self._half(transaction)
            if half is None:
                del offers[offset]
                continue
            offer.visible_at_ms = now + lease_ms
            offered = dataclasses.replace(half, properties=offered_properties(half))
            taken.append(CheckOffer(transaction, offered, offer.visible_at_ms))
        return taken

    def _next_visible_s(
        self, group: str, topic_allowed: Callable[[str], bool] | None
    ) -> float | None:
        """Seconds until a leased offer this poller may take comes back; None: none will."""
        now = now_ms()
        leased = [
            o.visible_at_ms
            for o in self._offers.get(group, {}).values()
            if o.visible_at_ms > now
            and (topic_allowed is None or topic_allowed(o.transaction.topic))
        ]
        return (min(leased) - now) / 1000 if leased else None

    def release_check(self, transaction_id: str, producer_group: str) -> None:
        """The producer does not know yet (UNKNOWN): drop the offer; the next check asks
        again. An ended transaction has nothing to check: TransactionEndedError, as an end
        the other way gets."""
        transaction = self._owned(transaction_id, producer_group)
        if transaction.state.ended:
            raise _already_ended(transaction, "there is nothing left to check")
        offers = self._offers.get(producer_group)
        if offers is not None:
            offers.pop(transaction.half_offset, None)


def _already_ended(transaction: Transaction, consequence: str) -> TransactionEndedError:
    done = "committed" if transaction.state is TransactionState.COMMITTED else "rolled back"
    return TransactionEndedError(
        f"transaction {transaction.transaction_id} was already {done}; {consequence}"
    )


def _no_listener(due_ms: int) -> None:
    del due_ms


def _outside_a_cluster(status: PutStatus) -> bool:
    """A broker outside a cluster has no successor that could end a transaction the other
    way: whatever its put answered, the end is decided."""
    del status
    return True
