"""The check-back task (RocketMQ's ``TransactionalMessageCheckService``), on a master.

It sleeps until the next open transaction is due, checks every due one
(:meth:`TransactionService.check`), and sleeps again. A transaction is due
``transaction_timeout`` (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``, whichever is longer)
after its half was stored, then ``check_interval`` after its last check: the first check
comes about 6 s after the send, the next every 30 s, as RocketMQ's defaults give. Both
times come from store times in the CommitLog (the half's, the last check copy's), so a
restart keeps the schedule and the count.
"""

from __future__ import annotations

import logging
from typing import Final

from services.background import BackgroundLoop
from services.transaction.service import TransactionService, now_ms

log = logging.getLogger(__name__)

BUSY_DUE_MS: Final = 20
"""The shortest sleep between two rounds."""


class TransactionCheckService:
    def __init__(self, transactions: TransactionService) -> None:
        self._transactions = transactions
        self._loop = BackgroundLoop(
            "transaction-check", self._check_round, self._until_next_round, step_first=True
        )
        self._wake_at_ms = 0  # when the sleeping task wakes by itself
        self._retry_ms = 0  # after a failed round: the least wait before the next one
        self.rounds = 0

    def start(self) -> None:
        self._transactions.changed = self._due
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _check_round(self) -> None:
        self._retry_ms = 0
        try:
            await self.check_due()
        except Exception:  # a failed put (disk full, fencing): try again shortly
            log.exception("a transaction check round failed; retrying")
            self._retry_ms = min(self._transactions.config.check_interval_ms, 1000)

    def _until_next_round(self) -> float:
        """Seconds until the next transaction is due, within the round's bounds."""
        interval_ms = self._transactions.config.check_interval_ms
        now = now_ms()
        # At least a moment: a transaction being ended right now stays due until it is.
        delay_ms = min(max(self._next_due_ms() - now, self._retry_ms, BUSY_DUE_MS), interval_ms)
        self._wake_at_ms = now + delay_ms
        return delay_ms / 1000

    def _due(self, due_ms: int) -> None:
        """A new transaction is due at ``due_ms``: wake up earlier if that is earlier."""
        if due_ms < self._wake_at_ms:
            self._loop.wake()

    async def check_due(self) -> int:
        """Check every open transaction that is due; returns how many were."""
        transactions = self._transactions
        interval_ms = transactions.config.check_interval_ms
        now = now_ms()
        due = [
            t
            for t in transactions.table.open_transactions()
            if t.open and t.next_check_ms(interval_ms) <= now
        ]
        for transaction in due:
            await transactions.check(transaction)
        self.rounds += 1
        return len(due)

    def _next_due_ms(self) -> int:
        interval_ms = self._transactions.config.check_interval_ms
        times = [
            t.next_check_ms(interval_ms)
            for t in self._transactions.table.open_transactions()
            if t.open
        ]
        return min(times, default=now_ms() + interval_ms)
