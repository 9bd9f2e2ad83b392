"""Timelines: the events found through the key index, in order, and each group's state from
its events or the live state."""

from __future__ import annotations

import pytest

from services import Broker, OffsetCommit, PullOptions
from services.errors import InvalidMessageIdError, MessageNotFoundError
from services.pop.service import ReceiveOptions
from services.trace.lookup import clock_text
from tests.services.trace.conftest import events_of, send_one


async def test_each_group_gets_its_state_and_what_has_not_happened_yet(traced: Broker) -> None:
    msg_id = await send_one(traced, "T")
    await send_one(traced, "T")
    await traced.offsets.commit("done", [OffsetCommit("T", 0, 2)])
    await traced.pull.pull_group("waits", "T", PullOptions(max_messages=1))  # pins offset 0
    options = ReceiveOptions(max_messages=1, invisible_ms=60_000)
    [taken] = (await traced.pop.receive("pops", "T", options)).messages
    await events_of(traced, msg_id, 3)
    timeline = traced.services.trace.timeline(msg_id)
    states = {g.group: (g.state, g.gap) for g in timeline.groups}
    assert states["done"] == ("acked", None)
    state, gap = states["waits"]
    assert state == "waiting"
    assert gap is not None and gap.endswith(
        "not yet delivered to group waits: its offset is 1 behind"
    )
    assert gap.startswith("stored ")
    state, gap = states["pops"]
    assert state == "in_flight"
    assert gap is not None and "(attempt 1), not acked yet" in gap
    assert clock_text(taken.invisible_until_ms) in gap


async def test_a_message_is_found_by_its_offset_msg_id_and_its_key(traced: Broker) -> None:
    msg_id = await send_one(traced, "T", keys=["order-9"])
    await events_of(traced, msg_id, 1)
    message = traced.messages.by_id(msg_id)
    lookup = traced.services.trace
    assert lookup.by_id(message.msg_id.lower()).msg_id == msg_id
    assert lookup.by_key("order-9").msg_id == msg_id
    assert lookup.by_key(msg_id).msg_id == msg_id
    with pytest.raises(MessageNotFoundError):
        lookup.by_key("order-10")


async def test_unknown_and_malformed_ids(traced: Broker) -> None:
    lookup = traced.services.trace
    with pytest.raises(InvalidMessageIdError):
        lookup.by_id("xyz")
    with pytest.raises(MessageNotFoundError):
        lookup.by_id("AB" * 16)


async def test_events_of_one_millisecond_keep_a_fixed_order_of_types(traced: Broker) -> None:
    msg_id = await send_one(traced, "T")
    await traced.offsets.commit("g", [OffsetCommit("T", 0, 1)])  # delivered at the commit
    events = await events_of(traced, msg_id, 3)
    assert events[1].at == events[2].at
    assert [e.type for e in events] == ["stored", "delivered", "acked"]
