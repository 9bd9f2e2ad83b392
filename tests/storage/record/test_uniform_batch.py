"""uniform_batch: the same records, units and answers as the general batch encoder, or None.

A Hypothesis property draws batches of messages with and without tags, keys, user
properties, delivery times, delay levels, idempotency stamps, odd hosts, flags and bodies;
whenever the uniform encoder takes a batch, every column it hands the CommitLog and every
byte it packs must be the general encoder's.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from storage.errors import StorageError
from storage.record.decode import decode_record
from storage.record.encode import EncodedBatch, check_batch
from storage.record.message import Message, UniformMessages
from storage.record.msg_id import encode_host
from storage.record.uniform_batch import (
    UniformBatch,
    _encoded,
    _tail_heads,
    uniform_batch,
)

UNIQ = "UNIQ_KEY"
GENERATED = st.text("0123456789ABCDEF", min_size=32, max_size=32)
EXTRAS = st.sampled_from(
    [
        {},
        {"TAGS": "TagA"},
        {"KEYS": "k1 k2"},
        {"color": "red"},
        {"TIMER_DELIVER_MS": "99"},
        {"DELAY": "2"},
        {"IDEMPOTENCY_KEY": "key-1", "IDEMPOTENCY_FP": "ab" * 16, "IDEMPOTENCY_BATCH": "3"},
    ]
)


@st.composite
def batches(draw: st.DrawFn) -> list[Message]:
    """Batches that are mostly uniform, with one thing changed here and there."""
    count = draw(st.integers(1, 6))
    odd = draw(st.integers(0, 3)) == 0  # now and then a batch the rules refuse
    topic = draw(st.sampled_from(["T", "Topic_a-1", "rmq_sys_wheel_timer"] + ["bad topic"] * odd))
    hosts = [("127.0.0.1", 5000), ("::1", 7)] + [("10.1.2.3", 2**31), ("x", 1)] * odd
    host = draw(st.sampled_from(hosts))
    shape = {
        "queue_id": draw(st.sampled_from([0, 3])),
        "flag": draw(st.sampled_from([0, 7, 2**31])),
        "sys_flag": draw(st.sampled_from([0, 0x10] + [0x4, 0x8] * odd)),
        "born_timestamp": draw(st.sampled_from([0, 1_700_000_000_000])),
        "born_host": host,
        "reconsume_times": draw(st.sampled_from([0, 2])),
        "prepared_transaction_offset": draw(st.sampled_from([0, 42])),
    }
    messages = []
    for _ in range(count):
        uniq = draw(GENERATED) if draw(st.integers(0, 7)) else draw(st.text(max_size=6))
        extras = draw(EXTRAS) if draw(st.integers(0, 15)) == 0 else {}
        properties = {UNIQ: uniq, **extras}
        if draw(st.integers(0, 19)) == 0:
            properties = draw(EXTRAS)  # no UNIQ_KEY at all
        fields = dict(shape)
        if draw(st.integers(0, 19)) == 0:  # one message unlike the others
            name = draw(st.sampled_from(sorted(shape)))
            fields[name] = ("10.9.9.9", 1) if name == "born_host" else 1
        body = draw(st.binary(max_size=30))
        messages.append(Message(topic, body, properties=properties, **fields))  # type: ignore[arg-type]
    return messages


def _general(messages: list[Message], max_body: int) -> EncodedBatch | StorageError | Exception:
    try:
        check_batch(messages)
        return EncodedBatch(messages, False, max_body)
    except (StorageError, ValueError) as exc:
        return exc


@settings(max_examples=300, deadline=None)
@given(batches(), st.sampled_from([40, 40, 40, 20]), st.integers(0, 2**40), st.integers(0, 2**31))
def test_a_uniform_batch_packs_what_the_general_encoder_packs(
    messages: list[Message], max_body: int, physical_offset: int, queue_offset: int
) -> None:
    general = _general(messages, max_body)
    uniform = uniform_batch(messages, False, max_body)
    event("uniform" if uniform is not None else "general")
    if uniform is None:
        return  # the general encoder answers, as before
    assert isinstance(general, EncodedBatch), "the uniform encoder took a batch the rules refuse"
    for name in (
        "topic",
        "queue_id",
        "count",
        "size",
        "sizes",
        "tags_codes",
        "keys",
        "uniq_keys",
        "idempotency_keys",
    ):
        assert getattr(uniform, name) == getattr(general, name), name
    store = (encode_host("192.168.0.9"), 10911)
    args = (physical_offset, queue_offset, 1_700_000_000_123, *store)
    assert uniform.pack(*args) == general.pack(*args)


def _plain(count: int, **fields: object) -> list[Message]:
    return [
        Message("T", b"body %d" % i, properties={UNIQ: f"{i:032X}"}, **fields)  # type: ignore[arg-type]
        for i in range(count)
    ]


def test_a_batch_of_bodies_is_uniform_and_decodes_back() -> None:
    messages = _plain(3, queue_id=2, born_timestamp=5, born_host=("10.0.0.1", 9))
    uniform = uniform_batch(messages, False, 1024)
    assert isinstance(uniform, UniformBatch)
    data, units, offsets = uniform.pack(1000, 7, 123, encode_host("127.0.0.1"), 10911)
    assert len(units) == 3 * 20 and offsets[0] == 1000
    for number, offset in enumerate(offsets):
        record = decode_record(data[offset - 1000 :])
        assert record is not None
        assert (record.body, record.queue_offset, record.physical_offset) == (
            b"body %d" % number,
            7 + number,
            offset,
        )
        assert record.properties == {UNIQ: f"{number:032X}"}


def test_a_keyed_batch_stays_uniform_with_its_stamp_on_the_first_message() -> None:
    messages = _plain(2)
    messages[0].properties["IDEMPOTENCY_KEY"] = "k"
    uniform = uniform_batch(messages, True, 1024)
    assert uniform is not None and uniform.idempotency_keys == [(0, "k")]


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"properties": {UNIQ: "A", "TAGS": "x"}}, id="tags"),
        pytest.param({"properties": {"KEYS": "k"}}, id="keys"),
        pytest.param({"properties": {UNIQ: "A", "TIMER_DELAY_MS": "5"}}, id="timer"),
        pytest.param({"queue_id": 1}, id="another-queue"),
        pytest.param({"sys_flag": 0x4}, id="transaction-half"),
        pytest.param({"body": b"x" * 100}, id="body-too-large"),
    ],
)
def test_anything_but_bodies_goes_the_general_way(change: dict[str, object]) -> None:
    messages = _plain(3)
    last = messages[-1]
    messages[-1] = Message(
        last.topic,
        change.get("body", last.body),  # type: ignore[arg-type]
        queue_id=change.get("queue_id", 0),  # type: ignore[arg-type]
        properties=change.get("properties", last.properties),  # type: ignore[arg-type]
        sys_flag=change.get("sys_flag", 0),  # type: ignore[arg-type]
    )
    assert uniform_batch(messages, False, 64) is None


@st.composite
def uniform_messages(draw: st.DrawFn) -> list[Message]:
    """A first message (now and then with something more than a body and a UNIQ_KEY) and
    messages like it with a body and a UNIQ_KEY each: what ``UniformMessages`` is given."""
    first = draw(batches())[0]
    bodies = draw(st.lists(st.binary(max_size=30), min_size=1, max_size=5))
    keys = draw(st.lists(GENERATED | st.text(max_size=6), min_size=len(bodies), max_size=5))
    rest = [
        Message(
            first.topic,
            body,
            first.queue_id,
            {UNIQ: key},
            first.flag,
            first.sys_flag,
            first.born_timestamp,
            first.born_host,
            first.reconsume_times,
            first.prepared_transaction_offset,
        )
        for body, key in zip(bodies, keys, strict=False)
    ]
    return [first, *rest]


@settings(max_examples=300, deadline=None)
@given(uniform_messages(), st.sampled_from([40, 40, 20]))
def test_uniform_messages_encode_as_the_messages_they_stand_for(
    messages: list[Message], max_body: int
) -> None:
    first = messages[0]
    if UNIQ not in first.properties:
        first.properties[UNIQ] = "0" * 32
    expected = uniform_batch(messages, False, max_body)
    bodies = [m.body for m in messages]
    keys = [m.properties[UNIQ] for m in messages]
    given = UniformMessages(first, bodies, keys)
    assert list(given) == messages
    found = uniform_batch(given, False, max_body)
    event("uniform" if found is not None else "general")
    assert (found is None) == (expected is None)
    if found is None or expected is None:
        return
    for name in UniformBatch.__slots__:
        assert getattr(found, name) == getattr(expected, name), name
    store = (encode_host("192.168.0.9"), 10911)
    args = (4096, 3, 1_700_000_000_123, *store)
    assert found.pack(*args) == expected.pack(*args)


@given(st.lists(GENERATED | st.text(max_size=6), max_size=8))
def test_keys_are_encoded_each_as_utf_8(keys: list[str]) -> None:
    assert _encoded(keys) == [key.encode() for key in keys]


def test_a_key_that_is_not_text_is_refused_as_before() -> None:
    with pytest.raises(AttributeError):
        _encoded(["A", None])  # type: ignore[list-item]


@given(st.sampled_from([b"\x01T", b"\x05Topic"]), st.lists(st.binary(max_size=40)))
def test_tail_heads_carry_each_key_s_properties_length(topic: bytes, keys: list[bytes]) -> None:
    assert _tail_heads(topic, keys) == [
        topic + (len(key) + 10).to_bytes(2, "big") + b"UNIQ_KEY\x01" for key in keys
    ]


def test_bodies_and_keys_are_counted_alike() -> None:
    first = _plain(1)[0]
    with pytest.raises(ValueError, match="a body, a UNIQ_KEY"):
        UniformMessages(first, [b"a", b"b"], ["A"])


def test_the_records_are_laid_out_header_body_tail() -> None:
    messages = _plain(3)
    uniform = uniform_batch(messages, False, 1024)
    assert uniform is not None
    parts = uniform._parts([b"h0", b"h1", b"h2"])
    tail = b"\x01T" + (42).to_bytes(2, "big") + b"UNIQ_KEY\x01"
    assert parts == [
        *(b"h0", b"body 0", uniform.first_tail, b"", b""),
        *(b"h1", b"body 1", tail, b"%032X" % 1, b"\x02"),
        *(b"h2", b"body 2", tail, b"%032X" % 2, b"\x02"),
    ]
    fixed = uniform.header.size
    assert uniform.sizes == [
        fixed + len(b"body 0") + len(uniform.first_tail),
        *[fixed + len(b"body 1") + len(tail) + 32 + 1] * 2,
    ]
