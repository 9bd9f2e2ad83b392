"""Transactional producers over gRPC: the half send, the end, and the check-back over Telemetry.

A gRPC client names no producer group; as RocketMQ's proxy registers a gRPC producer under
each topic it publishes to, the producer group of a transaction sent over gRPC is its topic.
The half send and the end are the transaction service's :meth:`~services.TransactionService.
prepare` and :meth:`~services.TransactionService.end`. The check-back is its
:meth:`~services.TransactionService.poll_checks`, the HTTP producers' long poll: a producer's
Telemetry stream polls the groups of the topics its settings publish to, and each offer goes
down the stream as a ``RecoverOrphanedTransactionCommand``; the checker's answer comes back as
an EndTransaction (``SOURCE_SERVER_CHECK``). An offer is leased to the stream for a check
interval: a checker that answers nothing is asked again then, one that answers UNKNOWN (no
resolution) at the next check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Final

from app.grpc.convert import ProtocolError, millis, outgoing_of, recover_command_of, status
from app.grpc.protocol import Code, definition, service
from app.security.principals import Principal
from services import Broker, TransactionService
from services.errors import InvalidGroupNameError, ServiceError

log = logging.getLogger(__name__)

CHECK_POLL_WAIT_MS: Final = 20_000
"""How long one poll of a stream's producer group waits for a due check."""
MAX_CHECKS_PER_POLL: Final = 16
RETRY_AFTER_FAILURE_S: Final = 1.0
"""A poll that failed (the broker not running yet) is tried again this much later."""


async def send_half(broker: Broker, message: Any, born_host: tuple[str, int]) -> Any:
    """Store a TRANSACTION message as a half message of its topic's producer group."""
    topic = message.topic.name
    system = message.system_properties
    immunity = None
    if system.HasField("orphaned_transaction_recovery_duration"):
        immunity = millis(system.orphaned_transaction_recovery_duration) // 1000
    prepared = await broker.transactions.prepare(
        topic, outgoing_of(message), topic, born_host=born_host, check_immunity_s=immunity
    )
    transaction = prepared.transaction
    return service.SendResultEntry(
        status=status(),
        message_id=transaction.transaction_id,
        transaction_id=transaction.transaction_id,
        offset=prepared.half.queue_offset,
    )


async def end_transaction(broker: Broker, request: Any) -> Any:
    """Commit or roll back (the producer's own end, or its checker's answer); a resolution
    left unspecified is RocketMQ's UNKNOWN: not known yet, ask again at the next check."""
    resolution, resolutions = request.resolution, definition.TransactionResolution
    transaction_id, group = request.transaction_id or request.message_id, request.topic.name
    if resolution == resolutions.TRANSACTION_RESOLUTION_UNSPECIFIED:
        broker.transactions.release_check(transaction_id, group)
    elif resolution in (resolutions.COMMIT, resolutions.ROLLBACK):
        commit = resolution == resolutions.COMMIT
        await broker.transactions.end(transaction_id, group, commit=commit)
    else:
        raise ProtocolError(Code.BAD_REQUEST, f"no resolution {resolution}")
    return service.EndTransactionResponse(status=status())


class TransactionChecks:
    """The check-backs one producer's Telemetry stream is sent: a poll per producer group,
    each offer handed to ``deliver`` as a command."""

    def __init__(
        self,
        transactions: TransactionService,
        principal: Principal,
        deliver: Callable[[Any], None],
    ) -> None:
        self._transactions = transactions
        self._principal = principal
        self._deliver = deliver
        self._polls: dict[str, asyncio.Task[None]] = {}

    def watch(self, groups: Iterable[str]) -> None:
        """Poll these producer groups too (those the caller may produce as)."""
        for group in groups:
            if group and group not in self._polls and self._principal.may_produce_as(group):
                self._polls[group] = asyncio.create_task(
                    self._poll(group), name=f"grpc-transaction-checks-{group}"
                )

    def close(self) -> None:
        for poll in self._polls.values():
            poll.cancel()
        self._polls.clear()

    async def _poll(self, group: str) -> None:
        lease_ms = self._transactions.config.check_interval_ms
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                offers = await self._transactions.poll_checks(
                    group,
                    max_checks=MAX_CHECKS_PER_POLL,
                    wait_ms=CHECK_POLL_WAIT_MS,
                    lease_ms=lease_ms,
                    topic_allowed=self._principal.may_produce,
                )
            except InvalidGroupNameError:
                return  # a topic that cannot name a producer group has no transactions
            except ServiceError as exc:
                log.debug("transaction checks of %s: %s", group, exc)
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)
                continue
            for offer in offers:
                self._deliver(recover_command_of(offer))
            if not offers and loop.time() - started < CHECK_POLL_WAIT_MS / 2000:
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)  # cut short: the broker stops


async def close_checks(checks: TransactionChecks, reader: asyncio.Task[None]) -> None:
    """End a stream's polls and its reader."""
    checks.close()
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
