"""What the proxy reads of the bodies it forwards, and how it rewrites a send's for the group
that hosts its queue (:mod:`app.proxy.bodies`): a send that names no queue is passed on as it
came, with the group's local queue in front; any other is decoded, checked, encoded again."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ApiError
from app.proxy.bodies import JsonSend, json_body
from services.cluster.proxy_routing import SplitBatchError


def test_a_send_that_names_no_queue_is_forwarded_as_it_came_with_the_local_queue_in_front() -> None:
    raw = b' {"messages": [{"body": "a"}, {"body": "b", "tags": "T"}]}'
    plan = JsonSend(raw)
    assert (plan.decoded, plan.queue_id, plan.sharding_key) == (None, None, None)
    sent = plan.for_queue(3)
    assert sent.endswith(raw.lstrip()[1:])
    assert orjson.loads(sent) == {"queue_id": 3, **orjson.loads(raw)}
    assert orjson.loads(JsonSend(b"{ }").for_queue(0)) == {"queue_id": 0}
    assert orjson.loads(JsonSend(b"{\n\t}").for_queue(1)) == {"queue_id": 1}


def test_an_undecoded_send_is_written_as_buffers_over_the_clients_bytes() -> None:
    """No copy of the client's body: its bytes after ``{`` are a view, the local queue id a
    short buffer in front; together they are the body :meth:`JsonSend.for_queue` gives."""
    raw = b'{"messages": [' + b",".join([b'{"body": "' + b"x" * 1024 + b'"}'] * 100) + b"]}"
    plan = JsonSend(raw)
    head, rest = plan.parts_for(2)
    assert isinstance(rest, memoryview) and rest.obj is raw and bytes(rest) == raw[1:]
    assert bytes(head) + bytes(rest) == plan.for_queue(2) == b'{"queue_id":2,' + raw[1:]
    decoded = JsonSend(b'{"body": "x", "queue_id": 5}').parts_for(1)
    assert [orjson.loads(part) for part in decoded] == [{"body": "x", "queue_id": 1}]


@pytest.mark.parametrize(
    ("raw", "queue_id", "sharding_key"),
    [
        pytest.param(b'{"body": "x", "queue_id": 5}', 5, None, id="queue"),
        pytest.param(b'{"body": "x", "sharding_key": "k"}', None, "k", id="sharding-key"),
        pytest.param(b'{"messages": [{"body": "x", "queue_id": 2}]}', 2, None, id="in-a-message"),
        pytest.param(b'{"body": "x", "queue\\u005fid": 4}', 4, None, id="escaped-name"),
        pytest.param(b'{"body": "under_score"}', None, None, id="underscore-elsewhere"),
    ],
)
def test_a_send_that_may_name_a_queue_is_decoded(
    raw: bytes, queue_id: int | None, sharding_key: str | None
) -> None:
    plan = JsonSend(raw)
    assert plan.decoded is not None
    assert (plan.queue_id, plan.sharding_key) == (queue_id, sharding_key)
    forwarded = orjson.loads(plan.for_queue(1))
    assert forwarded["queue_id"] == 1 and "sharding_key" not in forwarded


def test_bad_json_sends_are_refused_as_before() -> None:
    with pytest.raises(ApiError) as malformed:
        JsonSend(b'{"body": "x", "queue_id": ')
    assert malformed.value.code == "MALFORMED_JSON"
    with pytest.raises(ApiError) as not_object:
        JsonSend(b'["queue_id"]')
    assert not_object.value.code == "VALIDATION_FAILED"
    with pytest.raises(SplitBatchError):
        JsonSend(b'{"messages": [{"queue_id": 0}, {"queue_id": 1}]}')


def test_a_body_is_a_json_object_or_a_client_error() -> None:
    assert json_body(b"") == {}
    assert json_body(b'{"a": [1]}') == {"a": [1]}
    for raw, code in (
        (b"{", "MALFORMED_JSON"),
        (b"[1]", "VALIDATION_FAILED"),
        (b"1", "VALIDATION_FAILED"),
    ):
        with pytest.raises(ApiError) as refused:
            json_body(raw)
        assert refused.value.code == code


def test_a_send_too_deep_to_encode_again_is_a_client_error() -> None:
    """orjson reads 1024 levels but writes 254: a decoded send nested deeper cannot be passed
    on, and says so as the broker would (422)."""
    plan = JsonSend(b'{"queue_id":1,"body":"x","tags":' + b"[" * 300 + b"]" * 300 + b"}")
    with pytest.raises(ApiError) as refused:
        plan.parts_for(0)
    assert refused.value.code == "VALIDATION_FAILED"


texts = st.text(max_size=8)
messages = st.fixed_dictionaries(
    {"body": texts}, optional={"tags": texts, "keys": st.lists(texts, max_size=2)}
)
places = st.sampled_from([{}, {"queue_id": 3}, {"sharding_key": "k_1"}])


@given(
    message=messages,
    batch=st.lists(messages, min_size=1, max_size=4),
    place=places,
    in_messages=st.booleans(),
    local=st.integers(0, 15),
    spaces=st.sampled_from(["", " ", "\n\t"]),
)
def test_a_send_for_a_group_is_the_clients_with_the_local_queue_id(
    message: dict[str, object],
    batch: list[dict[str, object]],
    place: dict[str, object],
    in_messages: bool,
    local: int,
    spaces: str,
) -> None:
    """Passed on undecoded or decoded and encoded again, the body a group gets is the
    client's, naming the group's local queue id and no other queue or sharding key."""
    single = {**message, **place}
    named = [{**m, **place} for m in batch] if in_messages else batch
    several = {"messages": named, **({} if in_messages else place)}
    for sent, expected in (
        (single, {**message, "queue_id": local}),
        (several, {"messages": batch, "queue_id": local}),
    ):
        raw = spaces.encode() + orjson.dumps(sent)
        assert orjson.loads(JsonSend(raw).for_queue(local)) == expected
