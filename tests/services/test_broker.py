"""Broker lifecycle: one start, a locked store directory, shutdown answers parked pulls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, BrokerState, OutgoingMessage, PullOptions
from services.errors import BrokerUnavailableError
from storage.errors import StoreLockedError
from tests.services.conftest import SMALL, until


async def test_lifecycle(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(tmp_path / "s", SMALL))
    with pytest.raises(BrokerUnavailableError):
        _ = broker.send
    await broker.start()
    assert broker.state is BrokerState.RUNNING
    assert (tmp_path / "s" / "abort").exists()
    second = Broker(BrokerConfig(tmp_path / "s", SMALL))
    with pytest.raises(StoreLockedError):
        await second.start()
    assert second.state is BrokerState.FAILED
    await broker.stop()
    assert broker.state.value == BrokerState.STOPPED.value
    assert not (tmp_path / "s" / "abort").exists()
    with pytest.raises(BrokerUnavailableError):
        broker.store_gauges()


async def test_shutdown_answers_parked_pulls(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(tmp_path / "s", SMALL))
    await broker.start()
    await broker.send.send("S", [OutgoingMessage(b"x", queue_id=0)])
    pull = asyncio.create_task(broker.pull.pull_queue("S", 0, 1, PullOptions(wait_ms=30_000)))
    await until(lambda: broker.waiters.parked > 0)
    await broker.stop()
    assert (await pull).messages == []
