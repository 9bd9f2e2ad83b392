"""Consumer offsets: commits (one queue or several) and the lag report."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from app.schemas.common import (
    INT64_MAX,
    MAX_BATCH_MESSAGES,
    MAX_QUEUES,
    JsonInt,
    RequestBody,
    ResponseBody,
    TopicName,
)
from services import QueueLag, TopicLag


class OffsetCommitIn(RequestBody):
    offset: JsonInt = Field(
        ge=0, le=INT64_MAX, description="The next offset the group will consume."
    )


class OffsetCommitItem(RequestBody):
    topic: TopicName
    queue_id: JsonInt = Field(ge=0, lt=MAX_QUEUES)
    offset: JsonInt = Field(
        ge=0, le=INT64_MAX, description="The next offset the group will consume."
    )


class OffsetBatchIn(RequestBody):
    offsets: list[OffsetCommitItem] = Field(min_length=1, max_length=MAX_BATCH_MESSAGES)


class CommittedOffsetOut(ResponseBody):
    topic: str
    queue_id: int
    offset: int


class OffsetCommitResponse(ResponseBody):
    group: str
    offsets: list[CommittedOffsetOut]


class QueueLagOut(ResponseBody):
    queue_id: int
    committed_offset: int
    min_offset: int
    max_offset: int
    lag: int = Field(description="Messages between the committed offset and the max offset.")
    lag_seconds: float | None = Field(
        description="Age of the oldest message not consumed yet: now minus its store time "
        "(0 when nothing waits; null when its store time cannot be read)."
    )
    last_commit_timestamp: int
    in_flight: int = Field(
        default=0,
        description="POP groups: received and not acked yet (counted in `lag` too: a POP "
        "group's committed offset is its lowest un-acked offset).",
    )


class TopicLagOut(ResponseBody):
    topic: str
    total_lag: int
    queues: list[QueueLagOut]


class GroupOffsetsResponse(ResponseBody):
    group: str
    total_lag: int
    topics: list[TopicLagOut]


def queue_lag_out(lag: QueueLag, in_flight: int = 0) -> QueueLagOut:
    return QueueLagOut(
        queue_id=lag.queue_id,
        committed_offset=lag.committed_offset,
        min_offset=lag.min_offset,
        max_offset=lag.max_offset,
        lag=lag.lag,
        lag_seconds=lag.lag_seconds,
        last_commit_timestamp=lag.last_commit_timestamp,
        in_flight=in_flight,
    )


def group_offsets_out(
    group: str, report: list[TopicLag], in_flight: Mapping[tuple[str, int], int] | None = None
) -> GroupOffsetsResponse:
    """``in_flight``: POP messages in flight by (topic, queue id)."""
    flying = in_flight or {}
    topics = [
        TopicLagOut(
            topic=t.topic,
            total_lag=t.total_lag,
            queues=[queue_lag_out(q, flying.get((t.topic, q.queue_id), 0)) for q in t.queues],
        )
        for t in report
    ]
    return GroupOffsetsResponse(
        group=group, total_lag=sum(t.total_lag for t in topics), topics=topics
    )
