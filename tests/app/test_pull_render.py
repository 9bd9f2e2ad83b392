"""A pull renders its JSON from views of the records: the same JSON as from decoded messages
as a reader is shown them (:func:`services.messages.as_shown`)."""

from __future__ import annotations

import itertools

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.schemas.messages import message_out, view_out, views_out
from services.messages import as_shown
from storage.record.decode import decode_record
from storage.record.encode import EncodedBatch, encode_message
from storage.record.fields import VIEW_TOPIC, message_view, queue_topic
from storage.record.message import Message
from tests.storage.record.golden import (
    UNIQ_KEY,
    V6_STORE,
    every_kind_of_message_record,
    golden_message,
    in_mmap,
    packed,
    to_v2,
    uniq_key_records,
    with_properties,
)


def _record(message: Message) -> bytes:
    return encode_message(message, 7, 8192, 3333, ("10.0.0.9", 10911))


MORE_KINDS = [
    pytest.param(
        _record(
            golden_message(
                topic="%RETRY%g1",
                properties={"RETRY_TOPIC": "Orders", "TAGS": "A", "ORIGIN_MESSAGE_ID": "X"},
            )
        ),
        id="retried",
    ),
    pytest.param(_record(golden_message(body="grüße, 世界 ✓".encode())), id="utf8-text"),
    pytest.param(_record(golden_message(body=b"\xff\xfe", properties={"k": "v"})), id="no-tags"),
    pytest.param(
        _record(golden_message(properties={"KEYS": "a  b ", "TAGS": ""})), id="odd-keys-empty-tag"
    ),
]


EVERY_KIND = every_kind_of_message_record() + MORE_KINDS + uniq_key_records()


def decoded_out(record: bytes, encoding: str) -> dict[str, object]:
    """The JSON of ``record`` decoded whole, as a lookup renders it."""
    return message_out(as_shown(decode_record(record)), encoding)


@pytest.mark.parametrize("record", EVERY_KIND)
@pytest.mark.parametrize("encoding", ["auto", "base64"])
def test_a_view_renders_as_its_decoded_message(record: bytes, encoding: str) -> None:
    decoded = decoded_out(record, encoding)
    rendered = view_out(message_view(record), encoding)
    assert rendered == decoded
    assert orjson.dumps(rendered) == orjson.dumps(decoded)  # the same bytes on the wire


def test_both_ways_say_which_bodies_are_text() -> None:
    text = _record(golden_message(body=b"hello"))
    binary = _record(golden_message(body=b"\xc3\x28"))
    assert view_out(message_view(text))["body"] == "hello"
    assert view_out(message_view(binary))["body_encoding"] == "base64"
    assert view_out(message_view(binary))["body"] == "wyg="


@pytest.mark.parametrize("encoding", ["auto", "base64"])
@pytest.mark.parametrize("text_only", [True, False])
def test_a_pull_renders_as_its_decoded_messages_byte_for_byte(
    encoding: str, text_only: bool
) -> None:
    records = [p.values[0] for p in EVERY_KIND]
    if text_only:  # every body valid UTF-8: the one-pass way for the bodies
        records = [r for r in records if view_out(message_view(r))["body_encoding"] == "utf-8"]
    decoded = [decoded_out(r, encoding) for r in records]
    rendered = views_out([message_view(r) for r in records], encoding)
    assert len(rendered) == len(records) > 10
    assert orjson.dumps(rendered) == orjson.dumps(decoded)
    assert [list(m) for m in rendered] == [list(m) for m in decoded]  # the keys' order too
    assert views_out([], encoding) == []


# ---------------------------------------------------------------- every record kind, generated

_NAME_CHARS = st.characters(exclude_characters="\x00\x01\x02", exclude_categories=["Cs"])
_TOPIC_CHARS = "abcXYZ019_-%|"
_UNIQ_KEYS = st.one_of(
    st.text("0123456789ABCDEF", min_size=32, max_size=32),  # what a send sets
    st.text("0123456789abcdefXYZ-", min_size=30, max_size=34),  # near misses
)
_PROPERTY_NAMES = st.one_of(
    st.sampled_from(
        [
            "TAGS",
            "KEYS",
            "UNIQ_KEY",
            "RETRY_TOPIC",
            "REAL_TOPIC",
            "REAL_QID",
            "DELAY",
            "TIMER_DELIVER_MS",
            "TIMER_ENQUEUE_MS",
            "TIMER_ROLL_TIMES",
            "TRAN_MSG",
            "PGROUP",
        ]
    ),
    st.text(_NAME_CHARS, min_size=1, max_size=12),
)
_HOSTS = st.sampled_from(
    [("127.0.0.1", 10911), ("10.0.0.9", 0), ("255.255.255.255", 65535), ("::1", 5555), V6_STORE]
)


@st.composite
def _properties(draw: st.DrawFn) -> dict[str, str]:
    kind = draw(st.sampled_from(["uniq-key-only", "none", "any"]))
    if kind == "uniq-key-only":
        return {"UNIQ_KEY": draw(_UNIQ_KEYS)}
    if kind == "none":
        return {}
    properties = draw(st.dictionaries(_PROPERTY_NAMES, st.text(_NAME_CHARS, max_size=20)))
    if draw(st.booleans()):
        properties["KEYS"] = " ".join(draw(st.lists(st.sampled_from(["", "a", "k1", "ü"]))))
    if draw(st.booleans()):
        properties["UNIQ_KEY"] = draw(_UNIQ_KEYS)
    return properties


@st.composite
def _records(draw: st.DrawFn) -> bytes:
    """One record of any kind: v1 or v2, any host widths, a batch member or alone, any
    transaction type, text or binary body, with or without properties."""
    message = Message(
        topic=draw(st.text(_TOPIC_CHARS, min_size=1, max_size=127)),
        body=draw(
            st.one_of(
                st.binary(max_size=300),
                st.text(max_size=200).map(str.encode),
                st.just(b"x" * 1024),
            )
        ),
        queue_id=draw(st.integers(0, 2**31 - 1)),
        properties=draw(_properties()),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        sys_flag=draw(st.sampled_from([0, 0x2, 0x8, 0x4, 0xC])),
        born_timestamp=draw(st.integers(0, 2**62)),
        born_host=draw(_HOSTS),
        reconsume_times=draw(st.integers(0, 16)),
        prepared_transaction_offset=draw(st.integers(0, 2**40)),
    )
    physical = draw(st.integers(0, 2**62))
    queue_offset = draw(st.integers(0, 2**40))
    stored_at = draw(st.integers(0, 2**62))
    store_host = draw(_HOSTS)
    if draw(st.booleans()):  # a member of a batch
        first = golden_message()
        batch = EncodedBatch([first, message], len(packed(store_host[0])) == 16, 4096)
        data, _units, offsets = batch.pack(
            physical, queue_offset, stored_at, packed(store_host[0]), store_host[1]
        )
        record = data[offsets[1] - physical :]
    else:
        record = encode_message(message, queue_offset, physical, stored_at, store_host)
    if draw(st.booleans()):
        record = to_v2(record)
    return bytes(record)


@settings(max_examples=400, deadline=None)
@given(st.lists(_records(), min_size=1, max_size=5), st.sampled_from(["auto", "base64"]))
def test_a_pull_of_any_records_renders_as_the_decoded_messages(
    records: list[bytes], encoding: str
) -> None:
    # read as a pull reads them: straight from a mapped file, at their positions in it
    buffer = in_mmap(b"\x00" * 7 + b"".join(records))
    positions = list(itertools.accumulate([7] + [len(r) for r in records[:-1]]))
    rendered = views_out([message_view(buffer, at) for at in positions], encoding)
    decoded = [decoded_out(r, encoding) for r in records]
    assert orjson.dumps(rendered) == orjson.dumps(decoded)
    assert [list(m) for m in rendered] == [list(m) for m in decoded]  # the keys' order too


@settings(max_examples=200, deadline=None)
@given(
    st.lists(_records(), min_size=1, max_size=5),
    st.one_of(st.none(), st.text(_TOPIC_CHARS, min_size=1, max_size=127)),
)
def test_a_view_given_its_queue_topic_shows_that_text_for_records_of_that_topic(
    records: list[bytes], other: str | None
) -> None:
    # the queue's topic: that of the first record (a new str, not the decoder's), or another
    topic = decode_record(records[0]).topic.encode().decode() if other is None else other
    buffer = in_mmap(b"\x00" * 7 + b"".join(records))
    positions = list(itertools.accumulate([7] + [len(r) for r in records[:-1]]))
    for record, at in zip(records, positions, strict=True):
        view = message_view(buffer, at, queue_topic(topic))
        assert view == message_view(buffer, at)
        if decode_record(record).topic == topic:
            assert view[VIEW_TOPIC] is topic  # not decoded afresh


@pytest.mark.parametrize("record", uniq_key_records() + EVERY_KIND)
@pytest.mark.parametrize("topic", ["FooBar", "Foo", "FooBarX", "", "ü" * 128])
def test_a_view_of_its_queue_topic_is_the_view_of_any_topic(record: bytes, topic: str) -> None:
    # the queue's topic (the golden records' own, a prefix, a longer one, none, one too long
    # for a v1 record) matched with a UNIQ_KEY alone in one call: the view is unchanged
    buffer = in_mmap(b"\x00" * 5 + record)
    queue = queue_topic(topic)
    view = message_view(buffer, 5, queue)
    assert view == message_view(buffer, 5)
    assert view == message_view(record, 0, queue)
    if decode_record(record).topic == topic:
        assert view[VIEW_TOPIC] is topic


def test_a_record_of_its_queue_topic_with_a_uniq_key_alone_is_matched_in_one_call() -> None:
    record = with_properties({"UNIQ_KEY": UNIQ_KEY})  # topic FooBar, v1, IPv4 hosts
    queue = queue_topic("FooBar")
    topic_at = len(record) - 44 - 7  # TOPIC (length, FooBar), then PROPERTIES end the record
    assert record[topic_at : topic_at + 7] == b"\x06FooBar"
    assert queue[2](record, topic_at, len(record)) is not None
    assert queue_topic("FooBa")[2](record, topic_at, len(record)) is None
    assert message_view(record, 0, queue)[9] == {"UNIQ_KEY": UNIQ_KEY}
