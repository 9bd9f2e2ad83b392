"""Dead letters: browse a group's %DLQ% page by page within a byte budget, and redrive exactly
the selected ones, once."""

from __future__ import annotations

from services.dlq import PROPERTY_REDRIVEN_FROM, DlqFilter, DlqService, DlqState, RedriveStatus
from services.dlq_watermark import DlqWatermark
from services.send_back import SendBackRequest, SendBackService
from storage import Message
from tests.services.conftest import World


def dlq_service(world: World) -> DlqService:
    watermark = DlqWatermark(world.store, world.offsets)
    return DlqService(world.store, world.topic_for_send, world.idempotency, watermark)


async def fill_dlq(world: World, count: int) -> None:
    back = SendBackService(world.store, world.group, world.ensure_topic, world.idempotency.reput)
    for i in range(count):
        sent = world.store.put(
            [
                Message(
                    "Orders",
                    f"dead {i}".encode(),
                    properties={"TAGS": "bad" if i % 2 else "worse", "UNIQ_KEY": f"{i:032X}"},
                )
            ]
        )[0]
        await back.send_back(SendBackRequest("g", msg_id=sent.msg_id, delay_level=-1))


async def test_a_redrive_lowers_the_waiting_depth_and_the_waiting_list(world: World) -> None:
    await fill_dlq(world, 6)
    dlq = dlq_service(world)
    before = dlq.depth("g")
    assert (before.stored, before.waiting, before.redriven) == (6, 6, 0)

    # Dead letters 0 and 2 (tag "worse") first: the head moves past 0 only (1 still waits).
    await dlq.redrive(
        "g", DlqFilter(msg_ids={e.message.msg_id for e in dlq.browse("g", None, 6).entries[0:3:2]})
    )
    assert dlq.depth("g").waiting == 5
    waiting = dlq.browse("g", None, 10, state=DlqState.WAITING)
    assert [e.message.body for e in waiting.entries] == [b"dead 1", b"dead 3", b"dead 4", b"dead 5"]
    assert waiting.depth.waiting == 5  # 2 is redriven, but behind 1 which still waits

    await dlq.redrive("g", DlqFilter(tags={"bad"}))
    # Only 4 is left: the head is there, and 5 behind it counts until 4 goes.
    assert dlq.depth("g").waiting == 2
    left = dlq.browse("g", None, 10, state=DlqState.WAITING).entries
    assert [e.message.body for e in left] == [b"dead 4"]
    await dlq.redrive("g", DlqFilter(), dry_run=True)
    assert dlq.depth("g").waiting == 2, "a dry run moves nothing"
    await dlq.redrive("g", DlqFilter())
    after = dlq.depth("g")
    assert (after.stored, after.waiting, after.redriven) == (6, 0, 6)
    assert dlq.browse("g", None, 10, state=DlqState.WAITING).entries == []
    assert len(dlq.browse("g", None, 10, state=DlqState.REDRIVEN).entries) == 6
    assert len(dlq.browse("g", None, 10).entries) == 6, "the dead letters stay stored"

    await fill_dlq(world, 1)  # a new dead letter waits again
    assert dlq.depth("g").waiting == 1


async def test_redrive_moves_exactly_the_filtered_dead_letters_once(world: World) -> None:
    back = SendBackService(world.store, world.group, world.ensure_topic, world.idempotency.reput)
    for i in range(6):
        sent = world.store.put(
            [
                Message(
                    "Orders",
                    f"dead {i}".encode(),
                    properties={"TAGS": "bad" if i % 2 else "worse", "UNIQ_KEY": f"{i:032X}"},
                )
            ]
        )[0]
        await back.send_back(SendBackRequest("g", msg_id=sent.msg_id, delay_level=-1))
    dlq = dlq_service(world)
    page = dlq.browse("g", None, 4)
    assert len(page.entries) == 4 and page.next_offset == 4 and page.max_offset == 6
    assert all(e.original_topic == "Orders" and e.redriven_as is None for e in page.entries)

    selection = DlqFilter(tags={"bad"})
    preview = await dlq.redrive("g", selection, dry_run=True)
    assert [o.status for o in preview.outcomes] == [RedriveStatus.WOULD_MOVE] * 3
    assert world.pull_all("Orders") != [] and len(world.pull_all("Orders")) == 6

    report = await dlq.redrive("g", selection)
    assert report.count(RedriveStatus.MOVED) == 3
    moved = [m for m in world.pull_all("Orders") if PROPERTY_REDRIVEN_FROM in m.properties]
    assert sorted(m.body for m in moved) == [b"dead 1", b"dead 3", b"dead 5"]
    assert all(m.reconsume_times == 0 for m in moved)

    again = await dlq.redrive("g", selection)
    assert again.count(RedriveStatus.ALREADY_MOVED) == 3
    assert len([m for m in world.pull_all("Orders") if PROPERTY_REDRIVEN_FROM in m.properties]) == 3

    to_other = await dlq.redrive(
        "g", DlqFilter(msg_ids={page.entries[0].message.msg_id}), target_topic="Repair"
    )
    assert [o.status for o in to_other.outcomes] == [RedriveStatus.MOVED]
    assert [m.body for m in world.pull_all("Repair")] == [b"dead 0"]
    status = dlq.browse("g", None, 10)
    redriven = {e.message.body for e in status.entries if e.redriven_as}
    assert redriven == {b"dead 1", b"dead 3", b"dead 5"}


async def test_dead_letter_pages_keep_to_a_byte_budget(world: World) -> None:
    back = SendBackService(world.store, world.group, world.ensure_topic, world.idempotency.reput)
    for i in range(5):
        sent = world.store.put(
            [Message("Big", bytes([65 + i]) * 1000, properties={"KEYS": "same"})]
        )[0]
        await back.send_back(SendBackRequest("g", msg_id=sent.msg_id, delay_level=-1))
    dlq = dlq_service(world)
    page = dlq.browse("g", None, 10, max_bytes=2500)
    assert len(page.entries) == 2 and page.next_offset == 2
    rest = dlq.browse("g", page.next_offset, 10, max_bytes=2500)
    assert [e.queue_offset for e in rest.entries] == [2, 3]
    assert len(dlq.browse("g", None, 10, max_bytes=10).entries) == 1, "the first always"
