"""Redelivery: send-back to retry or DLQ, offset resets, seek by time, delay levels."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import ConfigDict, Field, WithJsonSchema, model_validator

from app.schemas.common import (
    INT64_MAX,
    MAX_QUEUES,
    JsonInt,
    RequestBody,
    ResponseBody,
    TimestampMs,
    TopicName,
)
from services import LevelProgress, QueueSeek, ResetPlan, SendBackResult

# ==================================================================== send-back


class SendBackIn(RequestBody):
    """A message the consumer failed to process: where it is, and how to retry it."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["msg_id"], "properties": {"msg_id": {"type": "string"}}},
                {
                    "required": ["commit_log_offset"],
                    "properties": {"commit_log_offset": {"type": "integer"}},
                },
            ]
        }
    )

    msg_id: str | None = Field(
        default=None, min_length=32, max_length=56, description="Its msg_id (offsetMsgId)."
    )
    commit_log_offset: JsonInt | None = Field(
        default=None, ge=0, le=INT64_MAX, description="Or its commit_log_offset."
    )
    delay_level: JsonInt = Field(
        default=0,
        ge=-1,
        le=64,
        description="0: automatic (3 + reconsume_times: 10 s, 30 s, 1 m, ...); -1: straight "
        "to the dead-letter queue; N: that delay level.",
    )
    max_reconsume_times: JsonInt | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="Attempts before the DLQ; default: the group's retry_max_times (16).",
    )

    @model_validator(mode="after")
    def _one_reference(self) -> SendBackIn:
        if (self.msg_id is None) == (self.commit_log_offset is None):
            raise ValueError("give exactly one of msg_id and commit_log_offset")
        return self


class SendBackOut(ResponseBody):
    destination: Literal["RETRY", "DLQ", "DROPPED"] = Field(
        description="RETRY: comes back after the delay; DLQ: dead-lettered; DROPPED: the group "
        "has no retry queues."
    )
    topic: str = Field(description="%RETRY%<group> or %DLQ%<group>.")
    queue_id: int
    msg_id: str = Field(description="The new message's msg_id.")
    origin_msg_id: str = Field(description="The msg_id of the first delivery.")
    reconsume_times: int
    delay_level: int
    deliver_at: int = Field(description="When it can be pulled again (ms since the epoch).")


def send_back_out(result: SendBackResult) -> SendBackOut:
    return SendBackOut(
        destination=result.destination.value,
        topic=result.topic,
        queue_id=result.queue_id,
        msg_id=result.msg_id,
        origin_msg_id=result.origin_msg_id,
        reconsume_times=result.reconsume_times,
        delay_level=result.delay_level,
        deliver_at=result.deliver_at_ms,
    )


# ==================================================================== offset reset


_QUEUE_ID_DIGITS: Final = "[0-9]{1,3}|10[01][0-9]|102[0-3]"
"""0 to 1023 (:data:`MAX_QUEUES` - 1) in decimal digits."""
assert MAX_QUEUES == 1024
QueueOffsets = Annotated[
    dict[str, JsonInt],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": f"^0*({_QUEUE_ID_DIGITS})$"},
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
            "maxProperties": MAX_QUEUES,
        }
    ),
]
"""Offsets by queue id written as text (a JSON object's keys), as the model's check takes
them."""


class OffsetResetIn(RequestBody):
    """Where to move a group. Use ``dry_run`` first: it shows what the reset would do."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                {
                    "if": {"properties": {"to": {"const": "timestamp"}}},
                    "then": {
                        "required": ["timestamp"],
                        "properties": {"timestamp": {"not": {"type": "null"}}},
                    },
                },
                {
                    "if": {"properties": {"to": {"const": "offsets"}}},
                    "then": {
                        "required": ["topic", "offsets"],
                        "properties": {
                            "topic": {"not": {"type": "null"}},
                            "offsets": {"type": "object", "minProperties": 1},
                        },
                    },
                },
            ]
        }
    )

    to: Literal["earliest", "latest", "timestamp", "offsets"]
    topic: TopicName | None = Field(
        default=None, description="One topic; default: every topic the group has offsets on."
    )
    timestamp: TimestampMs | None = Field(
        default=None, description="With `timestamp`: epoch ms or ISO 8601."
    )
    offsets: QueueOffsets | None = Field(
        default=None,
        max_length=MAX_QUEUES,
        description="With `offsets`: queue id (as a string) -> offset; other queues keep theirs.",
    )
    dry_run: bool = Field(default=False, description="Report the plan and change nothing.")

    @model_validator(mode="after")
    def _target_arguments(self) -> OffsetResetIn:
        if self.to == "timestamp" and self.timestamp is None:
            raise ValueError("`timestamp` is required with to=timestamp")
        if self.to == "offsets" and (not self.offsets or self.topic is None):
            raise ValueError("`topic` and `offsets` are required with to=offsets")
        for queue_id, offset in (self.offsets or {}).items():
            if not queue_id.isdigit() or int(queue_id) >= MAX_QUEUES:
                raise ValueError(f"offsets: {queue_id!r} is not a queue id")
            if not 0 <= offset <= INT64_MAX:
                raise ValueError(f"offsets: {offset} is not an offset")
        return self


class QueueResetOut(ResponseBody):
    topic: str
    queue_id: int
    current_offset: int = Field(description="-1 when the group never committed this queue.")
    target_offset: int
    min_offset: int
    max_offset: int
    skipped: int = Field(description="Messages the group will not receive because of the reset.")
    redelivered: int = Field(description="Messages the group will receive again.")


class OffsetResetOut(ResponseBody):
    group: str
    dry_run: bool
    applied: bool
    skipped: int
    redelivered: int
    queues: list[QueueResetOut]


def offset_reset_out(plan: ResetPlan) -> OffsetResetOut:
    return OffsetResetOut(
        group=plan.group,
        dry_run=plan.request.dry_run,
        applied=plan.applied,
        skipped=plan.skipped,
        redelivered=plan.redelivered,
        queues=[
            QueueResetOut(
                topic=q.topic,
                queue_id=q.queue_id,
                current_offset=q.current_offset,
                target_offset=q.target_offset,
                min_offset=q.min_offset,
                max_offset=q.max_offset,
                skipped=q.skipped,
                redelivered=q.redelivered,
            )
            for q in plan.queues
        ],
    )


# ==================================================================== seek and delays


class QueueSeekOut(ResponseBody):
    topic: str
    queue_id: int
    timestamp: int
    offset: int = Field(description="The offset for `timestamp` under the requested `boundary`.")
    store_timestamp: int = Field(description="Store time at `offset`; 0 when there is none.")
    min_offset: int
    max_offset: int


def queue_seek_out(topic: str, timestamp: int, seek: QueueSeek) -> QueueSeekOut:
    return QueueSeekOut(
        topic=topic,
        queue_id=seek.queue_id,
        timestamp=timestamp,
        offset=seek.offset,
        store_timestamp=seek.store_timestamp,
        min_offset=seek.min_offset,
        max_offset=seek.max_offset,
    )


class DelayLevelOut(ResponseBody):
    level: int
    delay_ms: int
    next_offset: int = Field(description="Next message of SCHEDULE_TOPIC_XXXX to deliver.")
    max_offset: int
    waiting: int = Field(description="Messages stored for this level, not delivered yet.")


class DelayLevelsOut(ResponseBody):
    levels: list[DelayLevelOut]


def delay_levels_out(progress: list[LevelProgress]) -> DelayLevelsOut:
    return DelayLevelsOut(
        levels=[
            DelayLevelOut(
                level=p.level,
                delay_ms=p.delay_ms,
                next_offset=p.next_offset,
                max_offset=p.max_offset,
                waiting=p.waiting,
            )
            for p in progress
        ]
    )
