"""The send body decoded without the models gives what the models give, or steps aside."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.errors import ApiError
from app.routes.messages import _outgoing
from app.schemas.messages import PlainSend, SendBatch, SendMessage, plain_send
from services import OutgoingMessage

TEXT = st.one_of(st.text(max_size=5), st.sampled_from(["", "a" * 255, "a" * 256, "\ud800"]))
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-2, max_value=1100),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    TEXT,
    st.lists(TEXT, max_size=3),
    st.dictionaries(TEXT, TEXT, max_size=2),
)
FIELDS = st.sampled_from(
    ["body", "tags", "keys", "queue_id", "sharding_key", "properties", "body_encoding", "x"]
)
MESSAGES = st.dictionaries(FIELDS, VALUES, max_size=4)
BATCHES = st.fixed_dictionaries(
    {"messages": st.one_of(st.lists(MESSAGES, max_size=3), VALUES)},
    optional={"queue_id": VALUES, "sharding_key": VALUES, "tags": VALUES},
)


def through_models(data: Any) -> PlainSend | None:
    """What the route makes of ``data`` through the models; None when they refuse it."""
    try:
        if isinstance(data, dict) and "messages" in data:
            batch = SendBatch.model_validate(data)
            messages = [_outgoing(m, ("body",)) for m in batch.messages]
            return PlainSend(messages, batch.queue_id, batch.sharding_key)
        return PlainSend([_outgoing(SendMessage.model_validate(data), ("body",))], None, None)
    except (ValidationError, ApiError):
        return None


def comparable(sent: PlainSend) -> tuple[object, ...]:
    def message(m: OutgoingMessage) -> tuple[object, ...]:
        return (*m._replace(keys=tuple(m.keys), properties=dict(m.properties)),)

    return ([message(m) for m in sent.messages], sent.batch_queue_id, sent.batch_sharding_key)


@settings(max_examples=600)
@given(data=st.one_of(MESSAGES, BATCHES, VALUES))
def test_plain_decoding_matches_the_models_or_steps_aside(data: Any) -> None:
    plain = plain_send(data)
    if plain is not None:
        expected = through_models(data)
        assert expected is not None, data
        assert comparable(plain) == comparable(expected)


def test_the_common_bodies_take_the_plain_path() -> None:
    one = plain_send({"body": "x", "tags": "TagA", "keys": ["k1"], "queue_id": 0})
    assert one == PlainSend([OutgoingMessage(b"x", "TagA", ("k1",), queue_id=0)], None, None)
    batch = plain_send({"messages": [{"body": "a"}, {"body": "b"}], "queue_id": 1})
    assert batch == PlainSend([OutgoingMessage(b"a"), OutgoingMessage(b"b")], 1, None)


def test_anything_else_goes_through_the_models() -> None:
    assert plain_send({"body": "x", "properties": {"a": "b"}}) is None
    assert plain_send({"body": "x", "queue_id": 1.0}) is None  # the models convert it
    assert plain_send({"body": "x", "queue_id": True}) is None
    assert plain_send({"body": "x", "tags": "\ud800"}) is None  # the models refuse it
    assert plain_send({"body": "x", "keys": ["k", "\udfff"]}) is None
    assert plain_send({"messages": []}) is None
    assert plain_send({"body": "\ud800"}) is None
    assert plain_send([{"body": "x"}]) is None
