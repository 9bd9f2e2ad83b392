"""Offset reset: the preview (a plan) says exactly what the reset then does."""

from __future__ import annotations

import asyncio

import pytest

from services.errors import InvalidOffsetError
from services.offset_reset import OffsetResetService, ResetRequest, ResetTarget
from storage import Message
from storage.config_managers import TopicConfig
from tests.services.conftest import World


async def test_reset_preview_matches_what_the_reset_then_does(world: World) -> None:
    world.topics.put(TopicConfig("Orders", read_queue_nums=2, write_queue_nums=2))
    stamps = []
    for i in range(10):
        stamps.append(world.store.put([Message("Orders", b"x", queue_id=i % 2)])[0])
        await asyncio.sleep(0.002)
    world.offsets.commit_offset("g", "Orders", 0, 3)
    service = OffsetResetService(world.store, world.offsets)
    orders = world.topics.get("Orders")
    assert orders is not None
    topics = [orders]
    middle = stamps[4].store_timestamp  # queue 0, offset 2
    request = ResetRequest(ResetTarget.TIMESTAMP, "Orders", timestamp_ms=middle, dry_run=True)
    plan = service.plan("g", request, topics)
    by_queue = {q.queue_id: q for q in plan.queues}
    assert (by_queue[0].current_offset, by_queue[0].target_offset) == (3, 2)
    assert by_queue[0].redelivered == 1
    assert (by_queue[1].current_offset, by_queue[1].target_offset) == (-1, 2)
    assert by_queue[1].skipped == 2
    assert world.offsets.query_offset("g", "Orders", 0) == 3, "a preview changes nothing"
    applied = await service.apply(plan)
    assert applied.applied
    assert world.offsets.offsets_of("g", "Orders") == {0: 2, 1: 2}

    latest = service.plan("g", ResetRequest(ResetTarget.LATEST, "Orders"), topics)
    assert [(q.target_offset, q.skipped) for q in latest.queues] == [(5, 3), (5, 3)]
    with pytest.raises(InvalidOffsetError):
        service.plan("g", ResetRequest(ResetTarget.OFFSETS, "Orders", offsets={0: 99}), topics)
    with pytest.raises(InvalidOffsetError):
        service.plan("g", ResetRequest(ResetTarget.OFFSETS, "Orders", offsets={7: 0}), topics)
