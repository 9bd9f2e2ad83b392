"""A batch validated to dicts (``SEND_BATCH_DICTS``) accepts exactly what ``SendBatch`` accepts,
with the same values once the defaults are filled in."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError, model_validator

from app.routes.messages import (
    _Bodies,
    _bodies_batch,
    _first_is_body_alone,
    _json_messages,
    _not_plain_text,
    _parse_send_json,
    _text_batch,
    _validated_text_batch,
)
from app.schemas.common import MAX_BATCH_MESSAGES, RequestBody, validated_dicts
from app.schemas.messages import SEND_BATCH_DICTS, SEND_MESSAGE_DEFAULTS, SendBatch

_NUMBERS = st.sampled_from([None, 0, 1, 4.0, 4.5, -1, 18, 19, 1023, 1024, 2**63, True, "1"])
_NAMES = st.sampled_from([None, "A", "", "a" * 255, "a" * 256, "a b", 1])
_TIMES = st.sampled_from(
    [None, 0, -1, 1_700_000_000_000, 2**63, True, 4.5, "2026-01-01T00:00:00Z", "tomorrow", "1"]
)
_MESSAGE_FIELDS = {
    "body": st.sampled_from(["", "hi", "aGk=", "a b", None, 1]) | st.text(max_size=3),
    "body_encoding": st.sampled_from(["utf-8", "base64", "latin-1", None]),
    "tags": _NAMES,
    "keys": st.lists(_NAMES, max_size=3) | _NAMES,
    "properties": st.dictionaries(st.sampled_from(["p", "", "a" * 256]), _NAMES, max_size=2)
    | _NAMES,
    "queue_id": _NUMBERS,
    "sharding_key": _NAMES,
    "delay_level": _NUMBERS,
    "deliver_after_ms": _NUMBERS,
    "deliver_at": _TIMES,
    "other": _NAMES,
}
assert _MESSAGE_FIELDS.keys() >= SEND_MESSAGE_DEFAULTS.keys()
_MESSAGES = st.fixed_dictionaries({}, optional=_MESSAGE_FIELDS)
_BATCHES = st.fixed_dictionaries(
    {"messages": st.lists(_MESSAGES, max_size=3) | _NAMES},
    optional={
        "queue_id": _NUMBERS,
        "sharding_key": _NAMES,
        "deliver_after_ms": _NUMBERS,
        "deliver_at": _TIMES,
        "other": _NAMES,
    },
)


def _accepted(validate: Any, body: bytes) -> Any:
    try:
        return validate(body)
    except ValidationError:
        return None


@settings(max_examples=500, deadline=None)
@given(_BATCHES)
def test_the_dicts_accept_what_the_model_accepts_with_the_same_values(data: Any) -> None:
    body = orjson.dumps(data)
    model = _accepted(SendBatch.model_validate_json, body)
    dicts = _accepted(SEND_BATCH_DICTS.validate_json, body)
    assert (model is None) == (dicts is None)
    if model is not None:
        assert [{**SEND_MESSAGE_DEFAULTS, **m} for m in dicts["messages"]] == [
            m.model_dump() for m in model.messages
        ]
        assert (dicts.get("queue_id"), dicts.get("sharding_key")) == (
            model.queue_id,
            model.sharding_key,
        )


def test_a_model_with_validator_methods_has_no_dicts() -> None:
    class Checked(RequestBody):
        n: int = 0

        @model_validator(mode="after")
        def _positive(self) -> Checked:
            return self

    assert isinstance(Checked(), BaseModel)
    with pytest.raises(TypeError, match="validator methods"):
        validated_dicts(Checked)


_BODIES_ALONE = st.fixed_dictionaries(
    {"messages": st.lists(st.fixed_dictionaries({"body": st.text(max_size=5)}), min_size=1)},
    optional={"queue_id": st.integers(0, 3), "sharding_key": st.sampled_from(["a", "b"])},
)


@settings(max_examples=300, deadline=None)
@given(_BODIES_ALONE | _BATCHES)
def test_a_text_batch_sends_what_the_model_way_sends(data: Any) -> None:
    body = orjson.dumps(data)
    fast = _text_batch(body)
    if fast is not None:
        given, queue_id, sharding_key = fast
        if isinstance(given, _Bodies):  # bodies alone: the messages are their bodies
            given = given.messages()
        assert (given, queue_id, sharding_key) == _json_messages(_parse_send_json(body))


@pytest.mark.parametrize(
    "data",
    [
        {"messages": [{"body": "a"}], "deliver_after_ms": 10},
        {"messages": [{"body": "a"}], "deliver_at": None},
        {"messages": [{"body": "a", "tags": "T", "deliver_at": 1_700_000_000_000}]},
        {"messages": [{"body": "a", "deliver_after_ms": 5}, {"body": "b"}]},
        {"messages": [{"body": "YQ==", "body_encoding": "base64"}]},
    ],
)
def test_timed_and_base64_batches_go_the_model_way(data: Any) -> None:
    assert _text_batch(orjson.dumps(data)) is None


def test_a_body_that_quotes_a_timer_field_is_still_a_text_batch() -> None:
    data = {"messages": [{"body": '"deliver_at": 1'}, {"body": "b", "tags": "T"}], "queue_id": 1}
    body = orjson.dumps(data)
    assert b'"deliver_' in body
    fast = _text_batch(body)
    assert fast is not None
    assert fast == _json_messages(_parse_send_json(body))


@pytest.mark.parametrize(
    ("given", "plain"),
    [
        ({}, True),
        ({"body_encoding": "base64"}, False),
        ({"deliver_at": 0}, False),
        ({"deliver_after_ms": 0}, False),
        ({"deliver_after_ms": None, "tags": "T"}, True),
    ],
)
def test_not_plain_text_is_base64_or_timed(given: dict[str, Any], plain: bool) -> None:
    assert _not_plain_text({**SEND_MESSAGE_DEFAULTS, **given}) is not plain


def _as_bodies(batch: Any) -> Any:
    """A text batch with its bodies alone as their list (``_Bodies`` has no equality)."""
    if batch is None:
        return None
    given, queue_id, sharding_key = batch
    return (given.bodies if isinstance(given, _Bodies) else given, queue_id, sharding_key)


@settings(max_examples=300, deadline=None)
@given(_BODIES_ALONE | _BATCHES, st.sampled_from([None, 1]))
def test_a_batch_of_bodies_parsed_by_orjson_is_what_the_rules_give(
    data: Any, indent: int | None
) -> None:
    for body in (orjson.dumps(data), json.dumps(data, indent=indent).encode()):
        fast = _bodies_batch(body)
        expected = _validated_text_batch(body)
        if fast is not None:
            assert _as_bodies(fast) == _as_bodies(expected)
        assert _as_bodies(_text_batch(body)) == _as_bodies(expected)


@pytest.mark.parametrize(
    "body",
    [
        b'{"messages": [{"body": "a"}, {"body": "b"}], "queue_id": 3}',
        b'{"messages":[{"body":""}],"queue_id":null}',
        b'{"messages":[{"body":"x","body":"y"}],"messages":[{"body":"z"}]}',
        b'{"messages":[{"body":"\\u00e9\\n\\"}"}]}',
        b' {"queue_id":1023,"messages":[{"body":"a"}]} ',
    ],
)
def test_bodies_alone_are_parsed_by_orjson(body: bytes) -> None:
    fast = _bodies_batch(body)
    assert fast is not None
    assert _as_bodies(fast) == _as_bodies(_validated_text_batch(body))


@pytest.mark.parametrize(
    "body",
    [
        b'{"messages":[{"body":"a"}],"queue_id":4.0}',  # whole float: the rules take it
        b'{"messages":[{"body":"a"}],"queue_id":true}',
        b'{"messages":[{"body":"a"}],"queue_id":1024}',
        b'{"messages":[{"body":"a"}],"queue_id":-1}',
        b'{"messages":[{"body":"a"}],"queue_id":18446744073709551616}',
        b'{"messages":[{"body":"a"}],"sharding_key":"k"}',
        b'{"messages":[{"body":"a"}],"other":1}',
        b'{"messages":[]}',
        b'{"messages":[{"body":1}]}',
        b'{"messages":[{"body":"a","tags":"T"}]}',
        b'{"messages":[{"body":"a"}, 1]}',
        b'{"messages":[{"body":"\\ud800"}]}',
        b'{"messages":[{"body":"a"}]',
        b"\xef\xbb\xbf" + b'{"messages":[{"body":"a"}]}',
        b'[{"messages":[{"body":"a"}]}]',
    ],
)
def test_anything_else_is_left_to_the_rules(body: bytes) -> None:
    assert _bodies_batch(body) is None
    assert _as_bodies(_text_batch(body)) == _as_bodies(_validated_text_batch(body))


def test_too_many_messages_are_left_to_the_rules() -> None:
    body = orjson.dumps({"messages": [{"body": "a"}] * (MAX_BATCH_MESSAGES + 1)})
    assert _bodies_batch(body) is None
    assert _validated_text_batch(body) is None


@pytest.mark.parametrize(
    ("body", "alone"),
    [
        (b'{"messages":[{"body":"a"},{"body":"b","tags":"T"}]}', True),
        (b'{"messages": [{"body": "a", "tags": "T"}]}', False),
        (b'{"messages":[{"body":"a\\":"}]}', False),  # only a guess
        (b'{"messages":"none"}', False),
    ],
)
def test_the_first_message_decides_whether_orjson_is_tried(body: bytes, alone: bool) -> None:
    assert _first_is_body_alone(body, body.find(b'"messages"')) is alone
