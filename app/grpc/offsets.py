"""The offset calls of MessagingService: a group's committed offsets and pulls by offset.

UpdateOffset and GetOffset are the offset service's commit and committed offset of one queue
(a group that consumes by offsets: a POP group answers ``PRECONDITION_FAILED``, as over HTTP
``CONSUME_MODE_CONFLICT``); QueryOffset is the topic service's seek (``BEGINNING``: the
queue's min offset, ``END``: its max, ``TIMESTAMP``: RocketMQ's ``searchOffset``);
PullMessage is the pull service's pull of one queue from an offset, streamed as RocketMQ's
proxy does: the status, each message, then the next offset.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from app.grpc.auth import Context, Guard
from app.grpc.convert import (
    ProtocolError,
    filter_of,
    millis,
    pulled_message_of,
    status,
)
from app.grpc.protocol import Code, definition, service
from services import Broker, OffsetCommit, PullOptions


class OffsetCalls:
    """UpdateOffset, GetOffset, QueryOffset and PullMessage over one broker."""

    def __init__(self, broker: Broker, guard: Guard) -> None:
        self.broker = broker
        self.guard = guard

    async def update_offset(self, request: Any, context: Context) -> Any:
        group, topic, queue_id = _group_queue(request)
        self.guard.require_consume(self.guard.caller_of(context), group, topic)
        await self.broker.offsets.commit(group, [OffsetCommit(topic, queue_id, request.offset)])
        return service.UpdateOffsetResponse(status=status())

    async def get_offset(self, request: Any, context: Context) -> Any:
        group, topic, queue_id = _group_queue(request)
        self.guard.require_consume(self.guard.caller_of(context), group, topic)
        self.broker.topics.check_read_queue(self.broker.topics.for_read(topic), queue_id)
        offset = self.broker.offsets.committed(group, topic, queue_id)
        if offset < 0:
            raise ProtocolError(
                Code.OFFSET_NOT_FOUND, f"{group} has no offset on {topic}/{queue_id}"
            )
        return service.GetOffsetResponse(status=status(), offset=offset)

    async def query_offset(self, request: Any, context: Context) -> Any:
        queue = request.message_queue
        topic, queue_id = queue.topic.name, queue.id
        self.guard.require_see(self.guard.caller_of(context), topic)
        policy = request.query_offset_policy
        timestamp = millis(request.timestamp) if request.HasField("timestamp") else 0
        if policy == definition.QueryOffsetPolicy.TIMESTAMP and not request.HasField("timestamp"):
            raise ProtocolError(Code.BAD_REQUEST, "a TIMESTAMP query needs its timestamp")
        seek = self.broker.topics.offset_by_time(topic, queue_id, timestamp)
        offset = {
            definition.QueryOffsetPolicy.BEGINNING: seek.min_offset,
            definition.QueryOffsetPolicy.END: seek.max_offset,
        }.get(policy, seek.offset)
        return service.QueryOffsetResponse(status=status(), offset=offset)

    async def pull_message(self, request: Any, context: Context) -> AsyncIterator[Any]:
        group, topic, queue_id = _group_queue(request)
        self.guard.require_consume(self.guard.caller_of(context), group, topic)
        tags, sql = filter_of(request.filter_expression)
        wait_ms = millis(request.long_polling_timeout)
        if request.batch_size < 0 or wait_ms < 0:
            raise ProtocolError(Code.BAD_REQUEST, "batch_size and long_polling_timeout are >= 0")
        options = PullOptions(
            max_messages=request.batch_size or 32, tags=tags, wait_ms=wait_ms, sql=sql
        )
        pulled = await self.broker.pull.pull_queue(
            topic, queue_id, request.offset, options, group=group
        )
        if not pulled.views:
            yield service.PullMessageResponse(
                status=status(Code.MESSAGE_NOT_FOUND, pulled.status.value)
            )
        else:
            yield service.PullMessageResponse(status=status())
            for view in pulled.messages:
                yield service.PullMessageResponse(message=pulled_message_of(view))
        yield service.PullMessageResponse(next_offset=pulled.next_offset)


def _group_queue(request: Any) -> tuple[str, str, int]:
    queue = request.message_queue
    return request.group.name, queue.topic.name, queue.id
