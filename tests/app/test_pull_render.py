"""A pull renders its JSON from views of the records: the same JSON as from decoded messages."""

from __future__ import annotations

import orjson
import pytest

from app.schemas.messages import message_out, view_out, views_out
from storage.record.decode import decode_record
from storage.record.encode import encode_message
from storage.record.fields import message_view
from storage.record.message import Message
from tests.storage.record.golden import (
    every_kind_of_message_record,
    golden_message,
    uniq_key_records,
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


@pytest.mark.parametrize("record", EVERY_KIND)
@pytest.mark.parametrize("encoding", ["auto", "base64"])
def test_a_view_renders_as_its_decoded_message(record: bytes, encoding: str) -> None:
    decoded = message_out(decode_record(record), encoding)
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
    decoded = [message_out(decode_record(r), encoding) for r in records]
    rendered = views_out([message_view(r) for r in records], encoding)
    assert len(rendered) == len(records) > 10
    assert orjson.dumps(rendered) == orjson.dumps(decoded)
    assert [list(m) for m in rendered] == [list(m) for m in decoded]  # the keys' order too
    assert views_out([], encoding) == []
