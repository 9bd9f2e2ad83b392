"""POP consumption without HTTP: a real store in a tmp dir, the broker's services, real time."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from services import (
    Broker,
    BrokerConfig,
    OutgoingMessage,
    PullOptions,
    ResetRequest,
    ResetTarget,
    StoreConfig,
)
from services.errors import (
    ConsumeModeConflictError,
    InvalidReceiptHandleError,
    ReceiptHandleExpiredError,
)
from services.pop.checkpoint import (
    PROPERTY_POP_CK,
    REVIVE_TOPIC,
    AckRecord,
    CheckPoint,
    ResetRecord,
    ack_message,
    checkpoint_message,
    decode_record,
    pop_ck_value,
    reset_message,
)
from services.pop.handles import HandleCodec, ReceiptHandle
from services.pop.inflight import Due, InFlight, InFlightTable
from services.pop.service import AckOutcome, Received, ReceivedMessage, ReceiveOptions
from services.pop.state_file import POP_STATE_FILE
from storage import Message, MessageStore, StoredMessage
from storage.config_managers import TopicConfig

DELAYS = " ".join(["1s"] * 18)  # every retry delay level is 1 s: give-backs return fast
SMALL = StoreConfig(
    commit_log_file_size=1024 * 1024, consume_queue_units_per_file=1000, message_delay_levels=DELAYS
)


def config(root: Path) -> BrokerConfig:
    return BrokerConfig(root / "store", SMALL, offset_persist_interval_s=0.05)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(config(tmp_path))
    await broker.start()
    yield broker
    if broker.running:
        await broker.stop()


async def send(broker: Broker, topic: str, count: int, **kwargs: object) -> None:
    messages = [OutgoingMessage(f"m{i}".encode(), **kwargs) for i in range(count)]  # type: ignore[arg-type]
    for start in range(0, count, 32):
        for item in messages[start : start + 32]:
            await broker.send.send(topic, [item])


async def receive(
    broker: Broker,
    group: str,
    topic: str,
    n: int = 16,
    invisible_ms: int = 60_000,
    wait_ms: int = 0,
) -> Received:
    return await broker.pop.receive(
        group, topic, ReceiveOptions(max_messages=n, invisible_ms=invisible_ms, wait_ms=wait_ms)
    )


async def drain(
    broker: Broker, group: str, topic: str, invisible_ms: int = 60_000
) -> list[tuple[StoredMessage, str, int]]:
    got: list[tuple[StoredMessage, str, int]] = []
    while True:
        batch = await receive(broker, group, topic, 32, invisible_ms)
        if not batch.messages:
            return got
        got += [(m.message, m.receipt_handle, m.delivery_attempt) for m in batch.messages]


async def eventually(condition: Callable[[], object], within: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def body(message: StoredMessage) -> str:
    return message.body.decode()


# ---------------------------------------------------------------- codecs


def test_checkpoint_ack_and_reset_records_round_trip_through_a_stored_message() -> None:
    ck = CheckPoint("abc", "G", "T", 3, (5, 7), (1, 2), 1000, 30_000, "tok")
    ack = AckRecord("abc", "G", "T", 3, (5,), "ack")
    reset = ResetRecord("G", (("T", 3, 4), ("%RETRY%G", 0, 0)))
    deleted = ResetRecord("G", deleted=True)
    for record, message in (
        (ck, checkpoint_message(ck)),
        (ack, ack_message(ack)),
        (reset, reset_message(reset)),
        (deleted, reset_message(deleted)),
    ):
        assert message.topic == REVIVE_TOPIC
        stored = StoredMessage(
            message.topic, 0, 0, 0, 0, message.body, message.properties, 0, 0, 0, 0,
            ("127.0.0.1", 0), 0, ("127.0.0.1", 0), 0, 0,
        )  # fmt: skip
        assert decode_record(stored) == record
    garbage = dataclasses.replace(stored, body=b"{not json")
    assert decode_record(garbage) is None


def test_a_forged_or_mangled_handle_is_invalid(tmp_path: Path) -> None:
    codec = HandleCodec.for_config_dir(tmp_path)
    handle = ReceiptHandle("G", "T", 1, 42, "ck", 123)
    text = codec.encode(handle)
    assert codec.decode(text) == handle
    assert HandleCodec.for_config_dir(tmp_path).decode(text) == handle  # the secret is kept
    other = HandleCodec(b"another store's secret")
    payload, _, mac = text.partition(".")
    for bad in (
        other.encode(handle),
        payload + ".AAAA",
        text[:-2],
        "x" * 2000,
        "",
        "nodot",
        "é.é",
        other.encode(ReceiptHandle("G", "T", 1, 43, "ck", 123)).split(".")[0] + "." + mac,
    ):
        with pytest.raises(InvalidReceiptHandleError):
            codec.decode(bad)


# ---------------------------------------------------------------- receive and ack


def store_of(broker: Broker) -> MessageStore:
    """The broker's store, for checks no service answers (what the revive topic holds)."""
    store = broker._store
    assert store is not None
    return store


async def test_concurrent_receives_never_take_the_same_message_and_acks_move_the_offset(
    broker: Broker,
) -> None:
    await send(broker, "T", 200)
    results = await asyncio.gather(*(drain(broker, "G", "T") for _ in range(6)))
    delivered = [body(m) for batch in results for m, _, _ in batch]
    assert sorted(delivered) == sorted(f"m{i}" for i in range(200))
    assert all(attempt == 1 for batch in results for _, _, attempt in batch)
    lag = broker.offsets.report("G", "T")[0]
    assert lag.total_lag == 200  # lag counts from the lowest un-acked offset
    handles = [h for batch in results for _, h, _ in batch]
    acks = await broker.pop.ack("G", handles)
    assert {a.outcome for a in acks} == {AckOutcome.ACKED}
    assert broker.offsets.report("G", "T")[0].total_lag == 0
    assert broker.pop.table.in_flight("G") == 0
    again = await broker.pop.ack("G", handles[:3])  # repeating an ack is harmless
    assert {a.outcome for a in again} == {AckOutcome.ACKED}
    assert (await receive(broker, "G", "T")).messages == []


async def test_a_parked_receive_wakes_on_arrival(broker: Broker) -> None:
    await broker.topics.for_send("W")  # exists, empty
    parked = asyncio.create_task(receive(broker, "G", "W", wait_ms=10_000))
    await asyncio.sleep(0.05)
    assert not parked.done()
    await send(broker, "W", 1)
    got = await asyncio.wait_for(parked, 5)
    assert [body(m.message) for m in got.messages] == ["m0"]


async def test_unacked_message_comes_back_through_retry_with_attempt_two(broker: Broker) -> None:
    await send(broker, "T", 3)
    first = await drain(broker, "G", "T", invisible_ms=300)
    assert len(first) == 3
    await broker.pop.ack("G", [first[0][1]])
    await eventually(lambda: broker.metrics.pop_redelivered == 2)
    again = await drain(broker, "G", "T")
    assert sorted(body(m) for m, _, _ in again) == ["m1", "m2"]
    assert {a for _, _, a in again} == {2}
    assert {m.topic for m, _, _ in again} == {"T"}  # under the topic it was sent to
    late = await broker.pop.ack("G", [first[1][1], "garbage"])
    assert [a.outcome for a in late] == [AckOutcome.EXPIRED, AckOutcome.INVALID]
    await broker.pop.ack("G", [h for _, h, _ in again])
    assert broker.pop.table.in_flight("G") == 0
    assert all(q.lag == 0 for t in broker.offsets.report("G") for q in t.queues)


async def test_extending_invisibility_keeps_it_away_and_replaces_the_handle(broker: Broker) -> None:
    await send(broker, "T", 1)
    [(_, handle, _)] = await drain(broker, "G", "T", invisible_ms=400)
    change = await broker.pop.change_invisibility("G", handle, 60_000)
    assert change.receipt_handle is not None
    await asyncio.sleep(0.8)  # past the first deadline
    assert (await receive(broker, "G", "T")).messages == []
    [old] = await broker.pop.ack("G", [handle])
    assert old.outcome is AckOutcome.INVALID
    with pytest.raises(InvalidReceiptHandleError):
        await broker.pop.change_invisibility("G", handle, 1000)
    [new] = await broker.pop.ack("G", [change.receipt_handle])
    assert new.outcome is AckOutcome.ACKED
    assert broker.metrics.pop_redelivered == 0


async def test_change_on_an_expired_handle_is_refused(broker: Broker) -> None:
    await send(broker, "T", 1)
    [(_, handle, _)] = await drain(broker, "G", "T", invisible_ms=100)
    await asyncio.sleep(0.2)
    with pytest.raises(ReceiptHandleExpiredError):
        await broker.pop.change_invisibility("G", handle, 1000)


async def test_give_back_returns_after_the_retry_delay_then_dead_letters_after_max(
    broker: Broker,
) -> None:
    group = await broker.groups.for_use("G")
    await broker.groups.put(dataclasses.replace(group, retry_max_times=2))
    await send(broker, "T", 1)
    attempts: list[int] = []
    while len(attempts) < 3:
        got = await receive(broker, "G", "T", wait_ms=5000)
        [item] = got.messages
        attempts.append(item.delivery_attempt)
        given = await broker.pop.change_invisibility("G", item.receipt_handle, 0)
        assert given.receipt_handle is None
    assert attempts == [1, 2, 3]
    assert (await receive(broker, "G", "T", wait_ms=1500)).messages == []
    dlq = store_of(broker).get_message("", "%DLQ%G", 0, 0, 10)
    assert [body(m) for m in dlq.messages] == ["m0"]
    assert broker.pop.table.in_flight("G") == 0


async def test_expired_message_dead_letters_after_max_reconsume_times(broker: Broker) -> None:
    group = await broker.groups.for_use("D")
    await broker.groups.put(dataclasses.replace(group, retry_max_times=1))
    await send(broker, "T", 1)
    attempts: list[int] = []
    for _ in range(2):
        got = await receive(broker, "D", "T", invisible_ms=100, wait_ms=5000)
        attempts += [m.delivery_attempt for m in got.messages]
    assert attempts == [1, 2]
    await eventually(lambda: broker.metrics.pop_dead_lettered == 1)
    dlq = store_of(broker).get_message("", "%DLQ%D", 0, 0, 10)
    assert [body(m) for m in dlq.messages] == ["m0"]
    assert (await receive(broker, "D", "T", wait_ms=200)).messages == []


# ---------------------------------------------------------------- modes


async def test_mixing_offset_pull_and_receive_on_a_group_is_a_conflict(broker: Broker) -> None:
    await send(broker, "T", 2)
    await broker.pull.pull_group("OFF", "T", PullOptions(max_messages=1), auto_commit=True)
    with pytest.raises(ConsumeModeConflictError):
        await receive(broker, "OFF", "T")
    await receive(broker, "POP", "T")
    assert broker.groups.get("POP").consume_mode == "pop"
    with pytest.raises(ConsumeModeConflictError):
        await broker.pull.pull_group("POP", "T", PullOptions())
    with pytest.raises(ConsumeModeConflictError):
        await broker.pull.pull_queue("T", 0, None, PullOptions(), group="POP")


# ---------------------------------------------------------------- restart


@pytest.mark.parametrize("lose_snapshot", [False, True])
async def test_restart_keeps_answered_acks_and_returns_what_was_in_flight(
    tmp_path: Path, lose_snapshot: bool
) -> None:
    broker = Broker(config(tmp_path))
    await broker.start()
    await send(broker, "T", 40)
    got = await drain(broker, "G", "T", invisible_ms=1500)
    acked = {body(m) for m, _, _ in got[:25]}
    await broker.pop.ack("G", [h for _, h, _ in got[:25]])
    committed_at = {
        q.queue_id: q.last_commit_timestamp for q in broker.offsets.report("G", "T")[0].queues
    }
    await broker.stop()
    state = json.loads((tmp_path / "store" / "config" / POP_STATE_FILE).read_text())
    assert sum(q["inFlight"] for q in state["queues"] if q["group"] == "G") == 15
    if lose_snapshot:
        (tmp_path / "store" / "config" / POP_STATE_FILE).unlink()
    broker = Broker(config(tmp_path))
    await broker.start()
    try:
        assert broker.pop.table.in_flight("G") == 15
        [restarted] = broker.offsets.report("G", "T")
        assert {q.queue_id: q.last_commit_timestamp for q in restarted.queues} == committed_at, (
            "a restart commits nothing"
        )
        assert (await receive(broker, "G", "T")).messages == []  # still invisible
        back: list[ReceivedMessage] = []
        while len(back) < 15:
            batch = await receive(broker, "G", "T", 32, wait_ms=5000)
            assert batch.messages, "in-flight messages must come back"
            back += batch.messages
        assert {body(m.message) for m in back} == {f"m{i}" for i in range(40)} - acked
        assert {m.delivery_attempt for m in back} == {2}
        await broker.pop.ack("G", [m.receipt_handle for m in back])
        assert (await receive(broker, "G", "T")).messages == []
    finally:
        await broker.stop()


@pytest.mark.parametrize("lose_snapshot", [False, True])
async def test_a_reset_and_a_delete_hold_across_a_restart(
    tmp_path: Path, lose_snapshot: bool
) -> None:
    """The RESET records undo the CKs before them and none after: what a receive took after
    the reset is still in flight after the restart, what was dropped is not."""
    broker = Broker(config(tmp_path))
    await broker.start()
    await send(broker, "T", 6, queue_id=0)
    await send(broker, "U", 2, queue_id=0)
    assert len((await receive(broker, "G", "T", 4)).messages) == 4
    assert len((await receive(broker, "D", "U")).messages) == 2
    reset = ResetRequest(ResetTarget.OFFSETS, "T", offsets={0: 3})
    plan = await broker.offset_reset.reset("G", reset)
    assert [(q.current_offset, q.target_offset) for q in plan.queues if q.queue_id == 0] == [(0, 3)]
    assert broker.pop.table.in_flight("G") == 0
    again = await receive(broker, "G", "T", 1)
    assert [body(m.message) for m in again.messages] == ["m3"]
    await broker.groups.delete("D")
    assert broker.pop.table.in_flight("D") == 0
    await broker.stop()
    if lose_snapshot:  # and its previous version: the whole revive topic is read again
        for snapshot in (tmp_path / "store" / "config").glob(f"{POP_STATE_FILE}*"):
            snapshot.unlink()
    broker = Broker(config(tmp_path))
    await broker.start()
    try:
        queues = broker.pop.table.queues
        assert {k: len(s.entries) for k, s in queues.items() if s.entries} == {("G", "T", 0): 1}
        assert not [k for k in queues if k[0] == "D"], "the deleted group left nothing"
        assert [body(m.message) for m in (await receive(broker, "G", "T")).messages] == [
            "m4",
            "m5",
        ]
        assert [body(m.message) for m in (await receive(broker, "D", "U")).messages] == [
            "m0",
            "m1",
        ]
    finally:
        await broker.stop()


def test_a_restart_and_a_forget_leave_nothing_in_flight_on_their_queues() -> None:
    table = InFlightTable()
    for key in (("G", "T", 0), ("G", "T", 1), ("H", "T", 0)):
        table.put(key, InFlight(7, "ck", 10**12, 1, 0, 0))
    state = table.restart(("G", "T", 0), 2)
    assert table.queue(("G", "T", 0)) is state
    assert (state.pop_offset, state.entries, state.lowest_unresolved()) == (2, {}, 2)
    assert table.next_deadline() == 10**12  # the other queues' deadline; the dropped one is stale
    assert sorted(table.forget("G")) == [("G", "T", 0), ("G", "T", 1)]
    assert list(table.queues) == [("H", "T", 0)]
    assert table.pop_due(10**12) == [Due(("H", "T", 0), 7, "ck")]


# ---------------------------------------------------------------- FIFO


async def test_fifo_queue_is_blocked_while_held_and_an_expired_message_comes_back_first(
    broker: Broker,
) -> None:
    group = await broker.groups.for_use("F")
    await broker.groups.put(dataclasses.replace(group, fifo=True))
    await send(broker, "T", 6, sharding_key="k")
    first = await receive(broker, "F", "T", 2, invisible_ms=300)
    assert [body(m.message) for m in first.messages] == ["m0", "m1"]
    assert (await receive(broker, "F", "T")).messages == []  # the queue is held
    await broker.pop.ack("F", [first.messages[0].receipt_handle])
    assert (await receive(broker, "F", "T")).messages == []  # m1 is still held
    again = await receive(broker, "F", "T", 4, wait_ms=5000)
    assert [(body(m.message), m.delivery_attempt) for m in again.messages] == [("m1", 2)]
    await broker.pop.ack("F", [again.messages[0].receipt_handle])
    rest = await receive(broker, "F", "T", 10)
    assert [body(m.message) for m in rest.messages] == ["m2", "m3", "m4", "m5"]


async def test_receives_rotate_over_the_queues_so_none_starves(broker: Broker) -> None:
    for queue_id in range(8):
        await send(broker, "R", 10, queue_id=queue_id)
    first_queues = []
    for _ in range(8):
        got = await receive(broker, "G", "R", n=4)
        first_queues.append(got.messages[0].message.queue_id)
        assert {m.message.queue_id for m in got.messages} == {first_queues[-1]}
    assert sorted(first_queues) == list(range(8))


async def test_a_copy_whose_revive_ack_was_lost_is_not_revived_again(tmp_path: Path) -> None:
    broker = Broker(config(tmp_path))
    await broker.start()
    await send(broker, "T", 1)
    [item] = (await receive(broker, "G", "T", invisible_ms=60_000)).messages
    handle = broker.pop.codec.decode(item.receipt_handle)
    # What a crash between the revive's two appends leaves: the copy, and no ACK record.
    retry = "%RETRY%G"
    await broker.topics.ensure(TopicConfig(retry, read_queue_nums=1, write_queue_nums=1, perm=6))
    properties = dict(item.message.properties)
    properties.update({"RETRY_TOPIC": "T", PROPERTY_POP_CK: pop_ck_value("T", 0, 0, handle.ck_id)})
    store_of(broker).put([Message(retry, item.message.body, 0, properties, reconsume_times=1)])
    await broker.stop()
    broker = Broker(config(tmp_path))
    await broker.start()
    try:
        assert broker.pop.table.in_flight("G") == 0
        [copy] = (await receive(broker, "G", "T")).messages
        assert (copy.message.body, copy.delivery_attempt) == (b"m0", 2)
        await broker.pop.ack("G", [copy.receipt_handle])
        assert (await receive(broker, "G", "T")).messages == []
    finally:
        await broker.stop()


def test_the_lowest_offset_in_flight_follows_every_take_change_and_resolve() -> None:
    """The committed offset (the lowest in flight) is kept without a scan of the in-flight
    set: checked against min() over a random mix, with one message held for a long while."""
    rng = random.Random(20)
    table = InFlightTable()
    key = ("G", "T", 0)
    model: dict[int, str] = {}

    def put(offset: int) -> None:
        model[offset] = ck_id = f"ck{rng.getrandbits(32)}"
        table.put(key, InFlight(offset, ck_id, 10**12, 1, 0, 0))

    for offset in range(5):
        put(offset)
    for step in range(5, 20_000):
        roll = rng.random()
        if roll < 0.5:
            put(step)  # a receive takes the next offset
        elif roll < 0.6:
            put(rng.choice(list(model)))  # a change of invisibility: a new CK, same offset
        else:
            held = step < 10_000  # offset 0 stays in flight for the first half
            candidates = [o for o in model if o != 0 or not held]
            if candidates:
                offset = rng.choice(candidates)
                assert table.resolve(key, offset, model.pop(offset), acked=True)
        state = table.queue(key)
        assert state is not None
        assert state.lowest_unresolved() == min(model, default=state.pop_offset)
        assert len(state.offset_heap) <= 2 * len(state.entries) + 64
