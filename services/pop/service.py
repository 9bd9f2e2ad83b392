"""Receive, ack and change of invisibility: the POP consumption API of a group.

Storage, as RocketMQ 5 does it: a receive takes messages from the group's pop offset on each
queue (advancing it at once, so concurrent receives never take the same message), puts them in
flight and writes one CK record per queue to the revive topic; an ack writes an ACK record.
Both are answered only once the record is durable (SYNC flush), through the same put as a send.
What is not acked in time is redelivered by :mod:`services.pop.revive`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from services.consumer_filter import ConsumerFilter
from services.errors import (
    ConsumeModeConflictError,
    InvalidReceiptHandleError,
    ReceiptHandleExpiredError,
    ServiceError,
)
from services.groups import GroupService, awaited_retry_queues
from services.long_poll import WaiterRegistry, WakeReason
from services.messages import as_shown
from services.metrics import Metrics
from services.offsets import OffsetService
from services.pop.checkpoint import (
    REVIVE_QUEUE_ID,
    REVIVE_TOPIC,
    AckRecord,
    CheckPoint,
    ResetRecord,
    ack_message,
    checkpoint_message,
    reset_message,
)
from services.pop.handles import HandleCodec, ReceiptHandle
from services.pop.inflight import InFlight, InFlightTable, QueueKey, QueueState
from services.pop.rebuild import rebuild
from services.pop.state_file import PopSnapshot, load_snapshot, save_snapshot
from services.pop.taker import QueueTaker, Take
from services.pop.tracing import in_flight_of, trace_outcome
from services.send import PutMessages
from services.send_back import SendBackRequest, SendBackService, original_topic
from services.topics import TopicService
from services.trace.tracer import Tracer
from storage import MessageStore, StoredMessage
from storage.config_managers import (
    CONSUME_MODE_OFFSETS,
    CONSUME_MODE_POP,
    SubscriptionGroupConfig,
)
from storage.topic_names import RETRY_GROUP_TOPIC_PREFIX, retry_topic

AbandonFactory = Callable[[], Awaitable[Any]]

MAX_RECEIVE_MESSAGES = 32
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MIN_INVISIBLE_MS = 1000
DEFAULT_INVISIBLE_MS = 30_000


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class ReceiveOptions:
    max_messages: int = 16
    wait_ms: int = 0
    invisible_ms: int = DEFAULT_INVISIBLE_MS
    tags: str | None = None
    max_bytes: int | None = None
    sql: str | None = None  # a SQL92 filter on the messages' properties


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    message: StoredMessage  # under its original topic (a retried one too)
    queue_topic: str  # the topic of the queue it was taken from (the retry topic for retries)
    receipt_handle: str
    delivery_attempt: int
    invisible_until_ms: int


@dataclass(frozen=True, slots=True)
class Received:
    group: str
    topic: str
    messages: list[ReceivedMessage]


class AckOutcome(Enum):
    ACKED = "acked"
    EXPIRED = "expired"  # its invisibility ran out: it may be with someone else now
    INVALID = "invalid"


@dataclass(frozen=True, slots=True)
class AckResult:
    receipt_handle: str
    outcome: AckOutcome
    detail: str = ""


@dataclass(frozen=True, slots=True)
class InvisibilityChange:
    """A new handle (the old one stops working), or None when the message was given back."""

    receipt_handle: str | None
    invisible_until_ms: int  # when it becomes visible again


@dataclass(frozen=True, slots=True)
class ConsumerServices:
    """What POP consumes through, as pull does: topic and group rules, consumer offsets,
    parked receives and the traffic counters."""

    topics: TopicService
    groups: GroupService
    offsets: OffsetService
    waiters: WaiterRegistry
    metrics: Metrics


class PopService:
    """The POP state of every group, and the three operations on it.

    ``config_dir`` holds its state file and the secret that signs receipt handles; ``put``
    writes CK and ACK records durably; ``send_back`` takes back what a consumer gives up.
    """

    def __init__(
        self,
        store: MessageStore,
        config_dir: Path,
        consumers: ConsumerServices,
        send_back: SendBackService,
        put: PutMessages,
        *,
        max_wait_ms: int = 30_000,
        tracer: Tracer | None = None,
    ) -> None:
        self.tracer = tracer or Tracer.off()
        self._store = store
        self._config_dir = config_dir
        self._topics = consumers.topics
        self._groups = consumers.groups
        self._offsets = consumers.offsets
        self._waiters = consumers.waiters
        self.metrics = consumers.metrics
        self.send_back = send_back
        self._put = put
        self._max_wait_ms = max_wait_ms
        self.table = InFlightTable()
        self.codec = HandleCodec.for_config_dir(config_dir)
        self._taker = QueueTaker(store, self.table, self._offsets, self._sync_committed)
        self._claimed: set[str] = set()  # groups this process switched to POP
        self.on_schedule: Callable[[int], None] = lambda deadline: None
        self._groups.add_state_keeper(self)  # told of group deletes and offset resets

    # ================================================================== state

    def load(self) -> int:
        """Rebuild the in-flight table from the revive topic (blocking; call before serving)."""
        self.codec = HandleCodec.for_config_dir(self._config_dir)  # a slave copied its master's
        read = rebuild(self._store, load_snapshot(self._config_dir), self.table)
        for key, state in self.table.queues.items():
            self._sync_committed(key, state)  # a start is not a commit: only what moved
        return read

    def snapshot(self) -> PopSnapshot:
        """The revive offset and committed offsets of this instant (on the loop thread)."""
        floor = self.table.floor()
        if floor is None:
            floor = self._store.max_offset_in_queue(REVIVE_TOPIC, REVIVE_QUEUE_ID)
        in_flight = {key: len(state.entries) for key, state in self.table.queues.items()}
        return PopSnapshot(floor, self.table.committed(), in_flight)

    def persist(self, snapshot: PopSnapshot) -> None:
        """Write a snapshot (blocking: call in a worker thread)."""
        save_snapshot(self._config_dir, snapshot)

    # ================================================================== receive

    async def receive(
        self,
        group: str,
        topic: str,
        options: ReceiveOptions,
        *,
        holder: str = "",
        abandon: AbandonFactory | None = None,
    ) -> Received:
        """Take up to ``max_messages`` for ``group``, long-polling up to ``wait_ms``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(options.wait_ms, self._max_wait_ms) / 1000
        wanted = ConsumerFilter.of(options.tags, options.sql)
        config = self._topics.for_read(topic)
        group_config = await self.claim_pop(await self._groups.for_consume(group), topic)
        wanted = wanted.or_stored(group_config, topic)
        keys = [(topic, q) for q in range(config.read_queue_nums)]
        if not group_config.fifo:
            keys += self._retry_keys(group_config)
        watch: asyncio.Future[Any] | None = None
        try:
            while True:
                takes = self._taker.take_round(
                    group_config, keys, options.max_messages, options.max_bytes, wanted
                )
                remaining = deadline - loop.time()
                if takes or remaining <= 0:
                    break
                if watch is None and abandon is not None:
                    watch = asyncio.ensure_future(abandon())
                reason = await self._waiters.wait(keys, remaining, wanted.tags, watch)
                if reason in (WakeReason.SHUTDOWN, WakeReason.ABANDONED):
                    break
        finally:
            if watch is not None and not watch.done():
                watch.cancel()
        if not takes:
            return Received(group, topic, [])
        return Received(group, topic, await self._check_out(group, takes, options, holder))

    async def claim_pop(
        self, config: SubscriptionGroupConfig, topic: str
    ) -> SubscriptionGroupConfig:
        """The group consumes by POP from now on; 409 when it consumes by offsets."""
        name = config.group_name
        if config.consume_mode == CONSUME_MODE_OFFSETS or (
            config.consume_mode != CONSUME_MODE_POP
            and name not in self._claimed
            and self._offsets.has_committed(name, topic)
            and not self._has_state(name, topic)
        ):
            raise ConsumeModeConflictError(
                f"group {name!r} consumes by offsets (pull and commit); a group consumes "
                "either by offsets or by receive/ack. Use another group, or set its "
                "consume_mode with PUT /v1/groups/{group}"
            )
        claimed = dataclasses.replace(config, consume_mode=CONSUME_MODE_POP)
        if config.consume_mode != CONSUME_MODE_POP and name not in self._claimed:
            self._claimed.add(name)  # before the await: concurrent receives claim once
            await self._groups.put(claimed)
        return claimed

    def _has_state(self, group: str, topic: str) -> bool:
        return any(k[0] == group and k[1] == topic for k in self.table.queues)

    def _retry_keys(self, group: SubscriptionGroupConfig) -> list[tuple[str, int]]:
        """The retry topic's queues; before it exists, the ones it will have (to park on)."""
        topic = retry_topic(group.group_name)
        try:
            count = self._topics.for_read(topic).read_queue_nums
        except ServiceError:
            return awaited_retry_queues(group)
        return [(topic, q) for q in range(count)]

    async def _check_out(
        self, group: str, takes: list[Take], options: ReceiveOptions, holder: str
    ) -> list[ReceivedMessage]:
        """Put the taken messages in flight and write their CKs (one batch, durable)."""
        pop_time = now_ms()
        deadline = pop_time + options.invisible_ms
        floor = self._store.max_offset_in_queue(REVIVE_TOPIC, REVIVE_QUEUE_ID)
        records = []
        ck_ids: list[str] = []
        out: list[ReceivedMessage] = []
        for take in takes:
            ck_id = secrets.token_hex(8)
            ck_ids.append(ck_id)
            offsets = tuple(m.queue_offset for m in take.messages)
            records.append(
                checkpoint_message(
                    CheckPoint(
                        ck_id,
                        group,
                        take.key[1],
                        take.key[2],
                        offsets,
                        tuple(take.attempts),
                        pop_time,
                        options.invisible_ms,
                        holder,
                    )
                )
            )
            for message, attempt in zip(take.messages, take.attempts, strict=True):
                entry = InFlight(
                    offset=message.queue_offset,
                    ck_id=ck_id,
                    deadline_ms=deadline,
                    attempt=attempt,
                    floor=floor,
                    pop_time_ms=pop_time,
                    holder=holder,
                )
                self.table.put(take.key, entry)
                handle = ReceiptHandle(
                    group, take.key[1], take.key[2], message.queue_offset, ck_id, deadline
                )
                out.append(
                    ReceivedMessage(
                        as_shown(_as_original(message)),
                        take.key[1],
                        self.codec.encode(handle),
                        attempt,
                        deadline,
                    )
                )
            self._sync_committed(take.key, self.table.ensure(take.key, 0))
        self.on_schedule(deadline)
        await self._put(records)
        if self.tracer.topic_on(takes[0].key[1]):
            for ck_id in ck_ids:
                self.tracer.received(ck_id)
        self.metrics.pop_received += len(out)
        for take in takes:
            topic = _as_original(take.messages[0]).topic
            size = sum(len(m.body) for m in take.messages)
            self.metrics.delivered(topic, len(take.messages), size)
        return out

    # ================================================================== ack

    async def ack(self, group: str, handles: list[str]) -> list[AckResult]:
        """Ack a batch; each handle gets its own outcome. Writes one ACK record per CK."""
        now = now_ms()
        results: list[AckResult | None] = []
        pending: dict[tuple[QueueKey, str], list[int]] = {}
        seen: set[tuple[QueueKey, int]] = set()
        for text in handles:
            try:
                handle = self.codec.decode(text)
            except InvalidReceiptHandleError as exc:
                results.append(AckResult(text, AckOutcome.INVALID, str(exc)))
                continue
            outcome = self._ack_outcome(group, handle, now)
            key = (handle.group, handle.topic, handle.queue_id)
            if outcome is not None:
                results.append(AckResult(text, outcome))
            elif (key, handle.offset) in seen:
                results.append(AckResult(text, AckOutcome.ACKED))
            else:
                seen.add((key, handle.offset))
                pending.setdefault((key, handle.ck_id), []).append(handle.offset)
                results.append(None)
        if pending:
            acked = in_flight_of(self.tracer, self.table, pending)
            await self._write_acks(pending, "ack")
            for key, deliveries in acked.items():
                trace_outcome(self.tracer, "acked", key, deliveries, now)
        done = [
            r if r is not None else AckResult(t, AckOutcome.ACKED)
            for t, r in zip(handles, results, strict=True)
        ]
        # A message counts as acked once: a repeated ack (in this batch or a later one)
        # answers "acked" again but writes and counts nothing.
        self.metrics.pop_acked += sum(len(offsets) for offsets in pending.values())
        self.metrics.pop_ack_expired += sum(r.outcome is AckOutcome.EXPIRED for r in done)
        return done

    def _ack_outcome(self, group: str, handle: ReceiptHandle, now: int) -> AckOutcome | None:
        """The outcome decided without writing; None when the ack is to be written."""
        if handle.group != group:
            return AckOutcome.INVALID
        key = (handle.group, handle.topic, handle.queue_id)
        entry = self.table.entry(key, handle.offset)
        if entry is not None and entry.ck_id == handle.ck_id:
            if entry.ready or entry.busy or now >= entry.deadline_ms:
                return AckOutcome.EXPIRED
            return None
        if self.table.was_acked(handle.ck_id, handle.offset):
            return AckOutcome.ACKED
        if self.table.was_replaced(handle.ck_id, handle.offset):
            return AckOutcome.INVALID
        if now >= handle.deadline_ms:
            return AckOutcome.EXPIRED
        return AckOutcome.INVALID  # replaced by a change of invisibility, or given back

    async def _write_acks(
        self, pending: dict[tuple[QueueKey, str], list[int]], reason: str
    ) -> None:
        """Mark busy, write the ACK records (durable), then take the messages out of flight."""
        for (key, _), offsets in pending.items():
            for offset in offsets:
                entry = self.table.entry(key, offset)
                if entry is not None:
                    entry.busy = True
        records = [
            ack_message(AckRecord(ck_id, key[0], key[1], key[2], tuple(offsets), reason))
            for (key, ck_id), offsets in pending.items()
        ]
        try:
            await self._put(records)
        except BaseException:
            for (key, _), offsets in pending.items():
                for offset in offsets:
                    entry = self.table.entry(key, offset)
                    if entry is not None:
                        entry.busy = False
            raise
        for (key, ck_id), offsets in pending.items():
            for offset in offsets:
                self.table.resolve(key, offset, ck_id, acked=reason == "ack")
            self.after_change(key)

    def after_change(self, key: QueueKey) -> None:
        """A queue's in-flight set changed: move its committed offset; wake FIFO receivers."""
        state = self.table.queue(key)
        if state is None:
            return
        self._sync_committed(key, state)
        group = self.group_config(key[0])
        if group is not None and group.fifo and not state.held():
            # No longer blocked: what waits there (later messages, or the ones due again)
            # was dispatched long ago, so no arrival will wake its receives.
            self._waiters.wake_queue(key[1], key[2])

    def _sync_committed(self, key: QueueKey, state: QueueState) -> None:
        committed = state.lowest_unresolved()
        if self._offsets.committed(key[0], key[1], key[2]) != committed:
            self._offsets.move(key[0], key[1], key[2], committed)

    # ================================================================== invisibility

    async def change_invisibility(
        self, group: str, text: str, invisible_ms: int
    ) -> InvisibilityChange:
        """Extend (or shorten) one delivery's invisibility; 0 gives the message back now.

        As RocketMQ's changeInvisibleTime: a new CK for that one offset, then an ACK of the old
        one (both in one atomic batch); the answer is a new handle and the old one stops working.
        """
        handle = self.codec.decode(text)
        now = now_ms()
        outcome = self._ack_outcome(group, handle, now)
        if outcome is AckOutcome.EXPIRED:
            raise ReceiptHandleExpiredError(
                "the handle's invisibility ran out: the message may be with someone else now"
            )
        if outcome is not None:
            raise InvalidReceiptHandleError(
                "the receipt handle is not current: it was acked, given back or replaced"
            )
        key = (handle.group, handle.topic, handle.queue_id)
        entry = self.table.entry(key, handle.offset)
        assert entry is not None
        group_config = await self._groups.for_use(group)
        if invisible_ms == 0 and not group_config.fifo:
            return await self._give_back(key, entry, group_config)
        if invisible_ms == 0:  # FIFO: blocked for the retry delay of this attempt, then first
            invisible_ms = self._retry_delay_ms(entry.attempt - 1)
        return await self._recheckpoint(key, entry, invisible_ms, now)

    async def _recheckpoint(
        self, key: QueueKey, entry: InFlight, invisible_ms: int, now: int
    ) -> InvisibilityChange:
        group, topic, queue_id = key
        ck_id = secrets.token_hex(8)
        deadline = now + invisible_ms
        ck = CheckPoint(
            ck_id,
            group,
            topic,
            queue_id,
            (entry.offset,),
            (entry.attempt,),
            now,
            invisible_ms,
            entry.holder,
        )
        old = AckRecord(entry.ck_id, group, topic, queue_id, (entry.offset,), "change")
        floor = self._store.max_offset_in_queue(REVIVE_TOPIC, REVIVE_QUEUE_ID)
        replaced = dataclasses.replace(
            entry, ck_id=ck_id, deadline_ms=deadline, floor=floor, pop_time_ms=now
        )
        entry.busy = True
        try:
            await self._put([checkpoint_message(ck), ack_message(old)])
        except BaseException:
            entry.busy = False
            raise
        self.table.put(key, replaced)
        self.table.remember_replaced(entry.ck_id, entry.offset)
        self.on_schedule(deadline)
        detail = {"invisible_ms": invisible_ms, "deadline": deadline}
        changed = [(entry.ck_id, entry)]
        trace_outcome(self.tracer, "invisibility_changed", key, changed, now, detail, ck_id)
        handle = ReceiptHandle(group, topic, queue_id, entry.offset, ck_id, deadline)
        return InvisibilityChange(self.codec.encode(handle), deadline)

    async def _give_back(
        self, key: QueueKey, entry: InFlight, group: SubscriptionGroupConfig
    ) -> InvisibilityChange:
        """Non-FIFO: back through send-back (the retry delay of its attempt, or the DLQ)."""
        message = self.message_at(key, entry.offset)
        entry.busy = True
        returns_at = nacked_at = now_ms()
        try:
            if message is not None:
                result = await self.send_back.send_back(
                    SendBackRequest(
                        group.group_name,
                        commit_log_offset=message.physical_offset,
                        max_reconsume_times=group.retry_max_times,
                    )
                )
                returns_at = result.deliver_at_ms
            await self._put([ack_message(AckRecord(entry.ck_id, *key, (entry.offset,), "nack"))])
        except BaseException:
            entry.busy = False
            raise
        self.table.resolve(key, entry.offset, entry.ck_id)
        self.table.remember_replaced(entry.ck_id, entry.offset)
        self.after_change(key)
        trace_outcome(self.tracer, "nacked", key, [(entry.ck_id, entry)], nacked_at)
        return InvisibilityChange(None, returns_at)

    def _retry_delay_ms(self, reconsume_times: int) -> int:
        levels = self._store.delay_levels
        level = min(3 + reconsume_times, len(levels))
        return int(levels[level - 1])

    # ================================================================== group changes

    async def forget_group(self, group: str) -> None:
        """The group was deleted: drop its POP state — in-flight messages (their handles stop
        working; none is revived) and pop offsets — so that a group created again under its
        name starts afresh. A RESET record keeps a restart from rebuilding what was dropped."""
        self._claimed.discard(group)
        if self.table.forget(group):
            await self._put([reset_message(ResetRecord(group, deleted=True))])

    async def restart_queues(self, group: str, positions: Mapping[tuple[str, int], int]) -> None:
        """The group's offsets were reset: POP consumption of each (topic, queue id) restarts
        at its position. What was in flight there is dropped with the old position (its
        handles stop working, none is revived to the retry topic): whatever is at or after
        the new position is delivered again from there, as attempt 1, and a FIFO queue is no
        longer blocked. A queue the group never received from starts at its committed offset
        anyway. The restart is recorded (RESET) before a receive is woken to read there."""
        restarted = []
        for (topic, queue_id), offset in positions.items():
            key = (group, topic, queue_id)
            if self.table.queue(key) is not None:
                self._sync_committed(key, self.table.restart(key, offset))
                restarted.append((topic, queue_id, offset))
        if not restarted:
            return
        try:
            await self._put([reset_message(ResetRecord(group, tuple(restarted)))])
        finally:
            for topic, queue_id, _ in restarted:
                self._waiters.wake_queue(topic, queue_id)

    # ================================================================== helpers

    def message_at(self, key: QueueKey, offset: int) -> StoredMessage | None:
        """The message at a queue offset, or None when it has left the store."""
        return self._taker.message_at(key, offset)

    @property
    def put(self) -> PutMessages:
        return self._put

    def group_config(self, group: str) -> SubscriptionGroupConfig | None:
        try:
            return self._groups.get(group)
        except ServiceError:
            return None


def _as_original(message: StoredMessage) -> StoredMessage:
    if not message.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return message
    return dataclasses.replace(message, topic=original_topic(message))
