"""Redelivery: send-back to retry/DLQ, offset resets with a preview, seek by time, and the
delay levels' progress; dead letters and their redrive are in :mod:`app.routes.dlq`."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query

from app.deps import BrokerDep
from app.routes.params import GroupPath, QueueIdPath, TopicPath
from app.schemas import (
    DelayLevelsOut,
    OffsetResetIn,
    OffsetResetOut,
    QueueSeekOut,
    SendBackIn,
    SendBackOut,
    delay_levels_out,
    offset_reset_out,
    queue_seek_out,
    send_back_out,
)
from app.schemas.common import TIMESTAMP_DESCRIPTION, TimestampMs
from services import ResetRequest, ResetTarget, SendBackRequest

router = APIRouter()


@router.post(
    "/v1/groups/{group}/retry",
    tags=["groups"],
    operation_id="sendBack",
    summary="Send a failed message back: it returns later, or goes to the dead-letter queue",
    description=(
        "RocketMQ's consumer send-back. The message goes to `%RETRY%<group>` and comes back "
        "to the group's pulls after delay level `3 + reconsume_times` (10 s, 30 s, 1 m, ...), "
        "with `reconsume_times` + 1; once `reconsume_times` reaches `max_reconsume_times` "
        "(the group's `retry_max_times`, 16) — or with `delay_level: -1` — it goes to "
        "`%DLQ%<group>`. The answer says where it went and when it comes back."
    ),
    response_model=SendBackOut,
)
async def send_back(group: GroupPath, body: SendBackIn, broker: BrokerDep) -> SendBackOut:
    result = await broker.send_back.send_back(
        SendBackRequest(
            group,
            msg_id=body.msg_id,
            commit_log_offset=body.commit_log_offset,
            delay_level=body.delay_level,
            max_reconsume_times=body.max_reconsume_times,
        )
    )
    return send_back_out(result)


@router.post(
    "/v1/groups/{group}/offsets/reset",
    tags=["groups"],
    operation_id="resetOffsets",
    summary="Move a group to earliest, latest, a time or explicit offsets — preview first",
    description=(
        "With `dry_run: true` the answer shows, per queue, the current and target offsets "
        "and how many messages the reset would skip or deliver again, and nothing changes. "
        "Without it the same plan is applied. No consumer needs to be online."
    ),
    response_model=OffsetResetOut,
)
async def reset_offsets(group: GroupPath, body: OffsetResetIn, broker: BrokerDep) -> OffsetResetOut:
    request = ResetRequest(
        ResetTarget(body.to),
        topic=body.topic,
        timestamp_ms=body.timestamp,
        offsets={int(q): o for q, o in body.offsets.items()} if body.offsets else None,
        dry_run=body.dry_run,
    )
    return offset_reset_out(await broker.offset_reset.reset(group, request))


@router.get(
    "/v1/topics/{topic}/queues/{queue_id}/offset",
    tags=["topics"],
    operation_id="getOffsetByTime",
    summary="The offset of a queue for a time (RocketMQ's searchOffset)",
    description=(
        "`boundary=closest` (the default, RocketMQ's `searchOffset`): the message stored "
        "closest to `timestamp` — a message stored just before it may win; when every "
        "message is earlier, the last one (max_offset - 1); when every one is later, the "
        "first. `boundary=lower`: the first message stored at or after `timestamp` "
        "(max_offset when none is), what a replay from that time wants."
    ),
    response_model=QueueSeekOut,
)
async def offset_by_time(
    topic: TopicPath,
    queue_id: QueueIdPath,
    broker: BrokerDep,
    timestamp: Annotated[TimestampMs, Query(description=TIMESTAMP_DESCRIPTION)],
    boundary: Annotated[
        Literal["closest", "lower"],
        Query(description="`closest` (RocketMQ's searchOffset) or `lower` (first at or after)."),
    ] = "closest",
) -> QueueSeekOut:
    seek = broker.topics.offset_by_time(topic, queue_id, timestamp, at_or_after=boundary == "lower")
    return queue_seek_out(topic, timestamp, seek)


@router.get(
    "/v1/delays",
    tags=["messages"],
    operation_id="getDelayLevels",
    summary="Delay levels: their delays and how many messages wait in each",
    response_model=DelayLevelsOut,
)
async def delay_levels(broker: BrokerDep) -> DelayLevelsOut:
    return delay_levels_out(broker.scheduler.progress())
