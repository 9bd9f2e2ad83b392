"""Request and response models of retries, dead letters, offset resets, seeks and delays."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from app.schemas import (
    INT64_MAX,
    MAX_QUEUES,
    MessageOut,
    RequestBody,
    ShortText,
    TopicName,
    message_out,
)
from services.dlq import DlqPage, RedriveReport, RedriveStatus
from services.offset_reset import ResetPlan
from services.schedule import LevelProgress
from services.send_back import SendBackResult
from services.topics import QueueSeek

# ==================================================================== send-back


class SendBackIn(RequestBody):
    """A message the consumer failed to process: where it is, and how to retry it."""

    msg_id: str | None = Field(
        default=None, min_length=32, max_length=56, description="Its msg_id (offsetMsgId)."
    )
    commit_log_offset: int | None = Field(
        default=None, ge=0, le=INT64_MAX, description="Or its commit_log_offset."
    )
    delay_level: int = Field(
        default=0,
        ge=-1,
        le=64,
        description="0: automatic (3 + reconsume_times: 10 s, 30 s, 1 m, ...); -1: straight "
        "to the dead-letter queue; N: that delay level.",
    )
    max_reconsume_times: int | None = Field(
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


class SendBackOut(BaseModel):
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


class OffsetResetIn(RequestBody):
    """Where to move a group. Use ``dry_run`` first: it shows what the reset would do."""

    to: Literal["earliest", "latest", "timestamp", "offsets"]
    topic: TopicName | None = Field(
        default=None, description="One topic; default: every topic the group has offsets on."
    )
    timestamp: int | None = Field(
        default=None, ge=0, le=INT64_MAX, description="With `timestamp`: ms since the epoch."
    )
    offsets: dict[str, int] | None = Field(
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


class QueueResetOut(BaseModel):
    topic: str
    queue_id: int
    current_offset: int = Field(description="-1 when the group never committed this queue.")
    target_offset: int
    min_offset: int
    max_offset: int
    skipped: int = Field(description="Messages the group will not receive because of the reset.")
    redelivered: int = Field(description="Messages the group will receive again.")


class OffsetResetOut(BaseModel):
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


# ==================================================================== dead letters


class DeadLetterOut(MessageOut):
    original_topic: str = Field(description="Where it was first sent (RETRY_TOPIC).")
    redriven_as: str | None = Field(
        description="msg_id of its copy in the original topic, when it has been redriven."
    )


class DeadLetterPage(BaseModel):
    group: str
    topic: str = Field(description="%DLQ%<group>")
    min_offset: int
    max_offset: int
    next_offset: int = Field(description="Pass as `offset` for the next page.")
    messages: list[DeadLetterOut]


def dead_letter_page_out(group: str, topic: str, page: DlqPage, encoding: str) -> DeadLetterPage:
    return DeadLetterPage(
        group=group,
        topic=topic,
        min_offset=page.min_offset,
        max_offset=page.max_offset,
        next_offset=page.next_offset,
        messages=[
            DeadLetterOut.model_validate(
                {
                    **message_out(entry.message, encoding),
                    "original_topic": entry.original_topic,
                    "redriven_as": entry.redriven_as,
                }
            )
            for entry in page.entries
        ],
    )


class RedriveIn(RequestBody):
    """Which dead letters to send back, and where. Filters combine with AND; no filter
    selects every dead letter (up to ``limit``)."""

    msg_ids: list[ShortText] = Field(
        default_factory=list, max_length=10_000, description="msg_ids or UNIQ_KEYs."
    )
    tags: list[ShortText] = Field(default_factory=list, max_length=64)
    begin_timestamp: int | None = Field(default=None, ge=0, le=INT64_MAX)
    end_timestamp: int | None = Field(default=None, ge=0, le=INT64_MAX)
    target_topic: TopicName | None = Field(
        default=None, description="Default: each message's original topic (RETRY_TOPIC)."
    )
    dry_run: bool = Field(default=False, description="Report what would move where; send none.")
    limit: int = Field(default=1000, ge=1, le=10_000, description="At most this many messages.")
    rate_per_second: float | None = Field(
        default=None, gt=0, le=100_000, description="Pace the re-sends."
    )


class RedriveOutcomeOut(BaseModel):
    dlq_msg_id: str
    uniq_key: str
    target_topic: str
    status: Literal["WOULD_MOVE", "MOVED", "ALREADY_MOVED", "FAILED"]
    new_msg_id: str | None = None
    error: str | None = None


class RedriveSummary(BaseModel):
    selected: int
    would_move: int
    moved: int
    already_moved: int
    failed: int


class RedriveOut(BaseModel):
    group: str
    dry_run: bool
    summary: RedriveSummary
    outcomes: list[RedriveOutcomeOut]


def redrive_out(report: RedriveReport) -> RedriveOut:
    return RedriveOut(
        group=report.group,
        dry_run=report.dry_run,
        summary=RedriveSummary(
            selected=len(report.outcomes),
            would_move=report.count(RedriveStatus.WOULD_MOVE),
            moved=report.count(RedriveStatus.MOVED),
            already_moved=report.count(RedriveStatus.ALREADY_MOVED),
            failed=report.count(RedriveStatus.FAILED),
        ),
        outcomes=[
            RedriveOutcomeOut(
                dlq_msg_id=o.dlq_msg_id,
                uniq_key=o.uniq_key,
                target_topic=o.target_topic,
                status=o.status.value,
                new_msg_id=o.new_msg_id,
                error=o.error,
            )
            for o in report.outcomes
        ],
    )


# ==================================================================== seek and delays


class QueueSeekOut(BaseModel):
    topic: str
    queue_id: int
    timestamp: int
    offset: int = Field(
        description="First offset stored at or after `timestamp`; max_offset when none is."
    )
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


class DelayLevelOut(BaseModel):
    level: int
    delay_ms: int
    next_offset: int = Field(description="Next message of SCHEDULE_TOPIC_XXXX to deliver.")
    max_offset: int
    waiting: int = Field(description="Messages stored for this level, not delivered yet.")


class DelayLevelsOut(BaseModel):
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
