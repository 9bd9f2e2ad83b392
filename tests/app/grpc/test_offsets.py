"""The offset calls of the gRPC face (UpdateOffset, GetOffset, QueryOffset, PullMessage) over
a real server, with the generated stub: the official Python client does not call them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2,
    service_pb2,
)

from tests.app.grpc.support import Face, queue, resource, serving, stub

TOPIC = "grpc-offsets"
GROUP = "grpc-offsets-readers"
Code = definition_pb2.Code
Policy = definition_pb2.QueryOffsetPolicy


@pytest.fixture(scope="module")
def face(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Face]:
    with serving(tmp_path_factory.mktemp("grpc-offsets") / "store") as face:
        face.topic(TOPIC, queues=1)
        for n in range(3):
            sent = {"body": f"m{n}", "tags": "even" if n % 2 == 0 else "odd", "queue_id": 0}
            assert face.http.post(f"/v1/topics/{TOPIC}/messages", json=sent).status_code == 201
        yield face


def query(face: Face, policy: int, timestamp_ms: int | None = None) -> Any:
    request = service_pb2.QueryOffsetRequest(
        message_queue=queue(TOPIC, 0), query_offset_policy=policy
    )
    if timestamp_ms is not None:
        request.timestamp.FromMilliseconds(timestamp_ms)
    with stub(face) as calls:
        return calls.QueryOffset(request)


def pull(face: Face, offset: int, group: str = GROUP, **fields: object) -> list[Any]:
    request = service_pb2.PullMessageRequest(
        group=resource(group), message_queue=queue(TOPIC, 0), offset=offset, **fields
    )
    with stub(face) as calls:
        return list(calls.PullMessage(request))


def test_query_offset_answers_the_queues_ends_and_a_time(face: Face) -> None:
    beginning, end = query(face, Policy.BEGINNING), query(face, Policy.END)
    assert (beginning.status.code, beginning.offset) == (Code.OK, 0)
    assert (end.status.code, end.offset) == (Code.OK, 3)
    assert query(face, Policy.TIMESTAMP, 0).offset == 0
    assert query(face, Policy.TIMESTAMP).status.code == Code.BAD_REQUEST


def test_a_group_updates_and_gets_its_offset(face: Face) -> None:
    target = queue(TOPIC, 0)
    with stub(face) as calls:
        before = calls.GetOffset(
            service_pb2.GetOffsetRequest(group=resource(GROUP), message_queue=target)
        )
        updated = calls.UpdateOffset(
            service_pb2.UpdateOffsetRequest(group=resource(GROUP), message_queue=target, offset=2)
        )
        after = calls.GetOffset(
            service_pb2.GetOffsetRequest(group=resource(GROUP), message_queue=target)
        )
        beyond = calls.UpdateOffset(
            service_pb2.UpdateOffsetRequest(group=resource(GROUP), message_queue=target, offset=99)
        )
    assert before.status.code == Code.OFFSET_NOT_FOUND
    assert updated.status.code == Code.OK
    assert (after.status.code, after.offset) == (Code.OK, 2)
    assert beyond.status.code == Code.ILLEGAL_OFFSET


def test_a_pull_streams_its_status_messages_and_next_offset(face: Face) -> None:
    status, *messages, next_offset = pull(face, 1, batch_size=10)
    assert status.status.code == Code.OK
    assert [m.message.body for m in messages] == [b"m1", b"m2"]
    assert [m.message.system_properties.queue_offset for m in messages] == [1, 2]
    assert next_offset.next_offset == 3
    tagged = pull(face, 0, filter_expression=definition_pb2.FilterExpression(expression="even"))
    assert [m.message.body for m in tagged[1:-1]] == [b"m0", b"m2"]
    status, at_end = pull(face, 3)
    assert status.status.code == Code.MESSAGE_NOT_FOUND
    assert at_end.next_offset == 3


def test_a_pull_by_a_pop_group_answers_its_code(face: Face) -> None:
    assert face.http.put(
        "/v1/groups/grpc-offsets-pop", json={"consume_mode": "pop"}
    ).status_code in (200, 201)
    [refused] = pull(face, 0, group="grpc-offsets-pop")
    assert refused.status.code == Code.PRECONDITION_FAILED
