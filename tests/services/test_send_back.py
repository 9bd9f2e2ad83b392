"""Consumer send-back (reference §9): retries through %RETRY%<group> with a growing delay, the
DLQ after the limit or a negative delay level, and the lookup of the message sent back."""

from __future__ import annotations

import random

import pytest

from services.errors import InvalidRequestError, MessageNotFoundError
from services.schedule import DelayScheduler
from services.send_back import Destination, SendBackRequest, SendBackService
from storage import Message
from storage.config_managers import SubscriptionGroupConfig
from storage.delay_levels import SCHEDULE_TOPIC
from storage.topic_names import dlq_topic, retry_topic
from tests.services.conftest import World, wait_for


async def test_send_back_retries_with_growing_delay_then_dead_letters(world: World) -> None:
    service = SendBackService(
        world.store, world.group, world.ensure_topic, world.idempotency.reput, random.Random(1)
    )
    world.groups.put(SubscriptionGroupConfig("g", retry_max_times=3))
    first = world.store.put(
        [Message("Orders", b"poison", properties={"TAGS": "A", "UNIQ_KEY": "U" * 32})]
    )[0]
    current = first.msg_id
    levels = []
    for attempt in range(3):
        result = await service.send_back(SendBackRequest("g", msg_id=current))
        assert result.destination is Destination.RETRY
        assert result.topic == retry_topic("g")
        assert result.reconsume_times == attempt + 1
        assert result.origin_msg_id == first.msg_id
        levels.append(result.delay_level)
        scheduled = world.store.look_message_by_id(result.msg_id)
        assert scheduled is not None and scheduled.topic == SCHEDULE_TOPIC
        assert scheduled.properties["RETRY_TOPIC"] == "Orders"
        assert scheduled.properties["UNIQ_KEY"] == "U" * 32
        current = result.msg_id
    assert levels == [3, 4, 5]
    final = await service.send_back(SendBackRequest("g", msg_id=current))
    assert final.destination is Destination.DLQ
    assert final.topic == dlq_topic("g")
    assert final.delay_level == 0
    [dead] = world.pull_all(dlq_topic("g"))
    assert dead.reconsume_times == 4
    assert dead.properties["RETRY_TOPIC"] == "Orders"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == first.msg_id
    assert world.topics.get(dlq_topic("g")) is not None


async def test_negative_delay_level_goes_straight_to_the_dlq(world: World) -> None:
    service = SendBackService(world.store, world.group, world.ensure_topic, world.idempotency.reput)
    sent = world.store.put([Message("Orders", b"bad")])[0]
    result = await service.send_back(
        SendBackRequest("g", commit_log_offset=sent.physical_offset, delay_level=-1)
    )
    assert result.destination is Destination.DLQ
    with pytest.raises(MessageNotFoundError):
        await service.send_back(SendBackRequest("g", commit_log_offset=sent.physical_offset + 1))


async def test_retried_message_returns_to_the_retry_topic_after_its_delay(world: World) -> None:
    scheduler = DelayScheduler(world.store, world.delays, world.idempotency.reput)
    await scheduler.start()
    try:
        service = SendBackService(
            world.store, world.group, world.ensure_topic, world.idempotency.reput
        )
        sent = world.store.put([Message("Orders", b"again")])[0]
        await service.send_back(SendBackRequest("g", msg_id=sent.msg_id))
        await wait_for(lambda: world.pull_all(retry_topic("g")) != [])
        [back] = world.pull_all(retry_topic("g"))
        assert back.body == b"again" and back.reconsume_times == 1
    finally:
        await scheduler.stop()


async def test_find_names_the_message_by_id_or_offset(world: World) -> None:
    service = SendBackService(world.store, world.group, world.ensure_topic, world.idempotency.reput)
    sent = world.store.put([Message("Orders", b"which")])[0]
    assert service.find(sent.msg_id).body == b"which"
    assert service.find(commit_log_offset=sent.physical_offset).msg_id == sent.msg_id
    with pytest.raises(MessageNotFoundError):
        service.find(commit_log_offset=sent.physical_offset + 1)
    with pytest.raises(InvalidRequestError):
        service.find()
    assert world.pull_all(retry_topic("g")) == [], "a lookup puts nothing"
