"""A broker with message trace on, for the trace services' tests."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, OutgoingMessage, TraceEvent
from tests.services.conftest import LEVELS, SMALL, wait_for


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker that traces every topic whose config does not say otherwise."""
    store = dataclasses.replace(SMALL, message_delay_levels=LEVELS)
    broker = Broker(BrokerConfig(tmp_path / "store", store, trace=True))
    await broker.start()
    yield broker
    await broker.stop()


async def send_one(broker: Broker, topic: str, keys: Sequence[str] = ()) -> str:
    """Send one message to queue 0 of ``topic``; its id (UNIQ_KEY)."""
    message = OutgoingMessage(b"x", keys=keys, queue_id=0)
    sent = await broker.send.send(topic, [message])
    return sent[0].uniq_key


async def events_of(broker: Broker, msg_id: str, count: int) -> list[TraceEvent]:
    """The message's traced events, once ``count`` are stored."""
    lookup = broker.services.trace
    await wait_for(lambda: len(lookup.timeline(msg_id).events) >= count)
    return lookup.timeline(msg_id).events
