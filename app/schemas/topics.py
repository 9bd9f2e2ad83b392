"""Topic configs and their queues' offsets."""

from __future__ import annotations

from pydantic import Field

from app.schemas.common import MAX_QUEUES, JsonInt, PageBody, RequestBody, ResponseBody
from services import SYSTEM_TOPICS, QueueStats, TopicConfig


class TopicIn(RequestBody):
    read_queue_nums: JsonInt = Field(
        default=8, ge=1, le=MAX_QUEUES, description="Queues consumers read."
    )
    write_queue_nums: JsonInt = Field(
        default=8, ge=1, le=MAX_QUEUES, description="Queues producers write."
    )
    perm: JsonInt = Field(
        default=6, ge=0, le=7, description="PermName bits: 4 read, 2 write, 1 inherit."
    )
    order: bool = False
    trace: bool | None = Field(
        default=None,
        description="Message trace for this topic: true or false; null (or absent) follows "
        "the broker's default (`--trace`).",
    )


class QueueStatsOut(ResponseBody):
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int = Field(description="Ms of the newest message; 0 when empty.")


class TopicOut(ResponseBody):
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    readable: bool
    writeable: bool
    order: bool
    trace: bool | None = Field(description="Message trace on or off; null: the broker default.")
    system: bool = Field(description="Written by the broker only.")


class TopicDetailOut(TopicOut):
    queues: list[QueueStatsOut]


class TopicListResponse(PageBody):
    topics: list[TopicOut] = Field(description="By name.")


def topic_out(config: TopicConfig) -> TopicOut:
    return TopicOut(
        topic=config.topic_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        readable=config.is_readable,
        writeable=config.is_writeable,
        order=config.order,
        trace=config.trace,
        system=config.topic_name in SYSTEM_TOPICS,
    )


def topic_detail_out(config: TopicConfig, queues: list[QueueStats]) -> TopicDetailOut:
    return TopicDetailOut(
        **topic_out(config).model_dump(),
        queues=[
            QueueStatsOut(
                queue_id=q.queue_id,
                min_offset=q.min_offset,
                max_offset=q.max_offset,
                last_store_timestamp=q.last_store_timestamp,
            )
            for q in queues
        ],
    )
