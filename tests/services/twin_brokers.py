"""Two brokers that must store the same bytes: a stopped clock and counted UNIQ_KEYs.

For the tests that run the same sends through two paths of the send service and compare
every answer and every byte of the two CommitLogs.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import services.send
import storage.message_store
from services import Broker, BrokerConfig, StoreConfig
from services.uniq_keys import UniqKeyGenerator

NOW_NS = time.time_ns()


class FixedClock:
    """The ``time`` module with ``time_ns`` stopped: both brokers stamp the same times."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def time_ns() -> int:
        return NOW_NS


def stop_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The send service and the store stamp their times from the stopped clock."""
    monkeypatch.setattr(services.send, "time", FixedClock())
    monkeypatch.setattr(storage.message_store, "time", FixedClock())


class CountingKeys(UniqKeyGenerator):
    """UNIQ_KEYs from a plain counter: both brokers hand out the same ones."""

    def __init__(self) -> None:
        super().__init__("10.0.0.7")
        self._numbers = itertools.count()

    def next(self) -> str:
        return f"{next(self._numbers):032X}"

    def next_many(self, count: int) -> list[str]:
        return [self.next() for _ in range(count)]


async def start_twin(root: Path) -> Broker:
    """A broker on a small store at ``root`` whose UNIQ_KEYs are counted and whose
    idempotency window is read on the stopped clock."""
    store = StoreConfig(commit_log_file_size=4 * 1024 * 1024, message_delay_levels="1h 2h")
    broker = Broker(BrokerConfig(root, store, offset_persist_interval_s=60))
    await broker.start()
    broker.send._uniq_keys = CountingKeys()  # the same keys in both
    idempotency = broker.send._idempotency
    if idempotency is not None:  # the dedup window read on the stopped clock too: a repeat
        idempotency._clock = _stopped_seconds  # finds its first send however late it runs
    return broker


@contextmanager
def running_twins(first: Path, second: Path) -> Iterator[tuple[asyncio.Runner, Broker, Broker]]:
    """Two twin brokers (their stores under ``first`` and ``second``) on one runner, for a
    test that drives both from Hypothesis' synchronous examples; both stopped at the end
    (the first also when the second fails to start)."""
    with asyncio.Runner() as runner:
        one = runner.run(start_twin(first / "store"))
        try:
            other = runner.run(start_twin(second / "store"))
            try:
                yield runner, one, other
            finally:
                runner.run(other.stop())
        finally:
            runner.run(one.stop())


def _stopped_seconds() -> float:
    """The stopped clock, as ``time.time`` gives it."""
    return NOW_NS / 1e9


def commit_log_of(root: Path) -> bytes:
    """Every byte of the CommitLog of the broker whose store is ``root / "store"``."""
    return b"".join(p.read_bytes() for p in sorted((root / "store" / "commitlog").iterdir()))
