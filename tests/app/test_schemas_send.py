"""A send's body as the models read it (``app.schemas.send``): the TypedDicts made from the
models accept exactly what the models accept; a JSON body becomes the messages the models
describe (whatever way its validation goes), its refusals are the models'; a raw body is one
message described by its query."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from fastapi.exceptions import RequestValidationError
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError, model_validator

from app.errors import ApiError
from app.schemas.common import RequestBody, validated_dicts
from app.schemas.send import (
    SEND_BATCH_DICTS,
    SEND_MESSAGE_DEFAULTS,
    RawSendQuery,
    SendBatch,
    SendMessage,
    SendRequest,
    json_send,
    raw_send,
)
from services import OutgoingMessage

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
def test_the_batch_dicts_accept_what_the_model_accepts_with_the_same_values(data: Any) -> None:
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


def _by_the_models(data: Any) -> SendRequest | str:
    """What the models make of a parsed body, the slow way (a model per message), or the
    refusal's kind."""
    batch = isinstance(data, dict) and "messages" in data
    try:
        model = (SendBatch if batch else SendMessage).model_validate(data)
    except ValidationError:
        return "422"
    messages = model.messages if isinstance(model, SendBatch) else [model]
    out = []
    for m in messages:
        if isinstance(model, SendBatch) and m.deliver_at is None and m.deliver_after_ms is None:
            m = m.model_copy(
                update={"deliver_at": model.deliver_at, "deliver_after_ms": model.deliver_after_ms}
            )
        try:
            body = (
                base64.b64decode(m.body, validate=True)
                if m.body_encoding == "base64"
                else (m.body.encode())
            )
        except ValueError:
            return "INVALID_BODY_ENCODING"
        out.append(
            OutgoingMessage(
                body, m.tags, tuple(m.keys), m.properties, m.queue_id, m.sharding_key,
                m.delay_level, m.deliver_after_ms, m.deliver_at,
            )
        )  # fmt: skip
    if isinstance(model, SendBatch):
        return SendRequest(out, model.queue_id, model.sharding_key)
    return SendRequest(out)


def _json_send(body: bytes) -> SendRequest | str:
    try:
        return json_send(body)
    except RequestValidationError:
        return "422"
    except ApiError as exc:
        return exc.code


_BODIES_ALONE = st.fixed_dictionaries(
    {"messages": st.lists(st.fixed_dictionaries({"body": st.text(max_size=5)}), min_size=1)},
    optional={"queue_id": st.integers(0, 3), "sharding_key": st.sampled_from(["a", "b"])},
)


@settings(max_examples=400, deadline=None)
@given(_BODIES_ALONE | _BATCHES | _MESSAGES)
def test_a_json_body_sends_what_the_models_describe(data: Any) -> None:
    assert _json_send(orjson.dumps(data)) == _by_the_models(data)


@pytest.mark.parametrize(
    "body",
    [
        b'{"body": "x", "tags": "messages"}',  # looks like a batch by its bytes
        b'{"body": "\\"messages\\""}',
        b'{"\\u006dessages": [{"body": "a"}]}',  # a batch whose bytes do not say so
    ],
)
def test_a_body_is_read_by_the_model_it_is_not_the_one_it_looks_like(body: bytes) -> None:
    assert _json_send(body) == _by_the_models(orjson.loads(body))
    assert _json_send(body) != "422"


def test_a_batch_gives_its_time_to_the_messages_without_one() -> None:
    body = {
        "messages": [{"body": "a"}, {"body": "b", "deliver_after_ms": 5}],
        "deliver_after_ms": 10,
    }
    sent = json_send(orjson.dumps(body))
    assert [m.deliver_after_ms for m in sent.messages] == [10, 5]


@pytest.mark.parametrize(
    "body",
    [b"{", b"\xef\xbb\xbf{}", b'{"body": "\\ud800"}', b'{"body": "\xff"}', b"", b"nul"],
)
def test_what_is_no_json_is_malformed_json(body: bytes) -> None:
    assert _json_send(body) in ("MALFORMED_JSON", "422")
    with pytest.raises((ApiError, RequestValidationError)):
        json_send(body)


def test_a_base64_body_that_is_not_is_refused_with_where_it_is() -> None:
    with pytest.raises(ApiError) as refused:
        json_send(b'{"messages": [{"body": "a"}, {"body": "%", "body_encoding": "base64"}]}')
    assert refused.value.code == "INVALID_BODY_ENCODING"
    assert "body.messages.1.body" in refused.value.detail


def test_a_raw_body_is_one_message_described_by_its_query() -> None:
    query = RawSendQuery.model_validate(
        {"tags": "T", "keys": ["k1", "k2"], "property": ["a=b", "c="], "queue_id": "2"}
    )
    [message] = raw_send("application/octet-stream", b"\x00raw", query).messages
    assert message == OutgoingMessage(b"\x00raw", "T", ("k1", "k2"), {"a": "b", "c": ""}, 2)


@pytest.mark.parametrize(
    ("content_type", "body", "code"),
    [
        ("application/x-www-form-urlencoded", b"a=b", "UNSUPPORTED_MEDIA_TYPE"),
        ("multipart/form-data; boundary=x", b"--x", "UNSUPPORTED_MEDIA_TYPE"),
        ("text/plain", b"", "MESSAGE_ILLEGAL"),
    ],
)
def test_a_raw_body_that_is_a_form_or_nothing_is_refused(
    content_type: str, body: bytes, code: str
) -> None:
    with pytest.raises(ApiError) as refused:
        raw_send(content_type, body, RawSendQuery())
    assert refused.value.code == code


def test_a_raw_property_is_name_equals_value() -> None:
    with pytest.raises(ApiError) as refused:
        raw_send("text/plain", b"x", RawSendQuery.model_validate({"property": ["novalue"]}))
    assert refused.value.code == "PARAMETER_NOT_ALLOWED"
