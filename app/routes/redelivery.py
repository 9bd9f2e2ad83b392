"""Redelivery: send-back to retry/DLQ, dead letters and their redrive, offset resets with a
preview, seek by time, and the delay levels' progress."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.deps import BrokerDep
from app.redelivery_schemas import (
    DeadLetterPage,
    DelayLevelsOut,
    OffsetResetIn,
    OffsetResetOut,
    QueueSeekOut,
    RedriveIn,
    RedriveOut,
    SendBackIn,
    SendBackOut,
    dead_letter_page_out,
    delay_levels_out,
    offset_reset_out,
    queue_seek_out,
    redrive_out,
    send_back_out,
)
from app.responses import problems
from app.routes.params import BodyEncodingQuery, GroupPath, QueueIdPath, TopicPath
from app.schemas import INT64_MAX
from services.dlq import DlqFilter
from services.groups import check_group_name
from services.offset_reset import ResetRequest, ResetTarget
from services.send_back import SendBackRequest, dlq_topic

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
    responses=problems(400, 403, 404, 413, 422, 503),
)
async def send_back(group: GroupPath, body: SendBackIn, broker: BrokerDep) -> SendBackOut:
    check_group_name(group)
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
    responses=problems(400, 404, 413, 422, 503),
)
async def reset_offsets(group: GroupPath, body: OffsetResetIn, broker: BrokerDep) -> OffsetResetOut:
    check_group_name(group)
    request = ResetRequest(
        ResetTarget(body.to),
        topic=body.topic,
        timestamp_ms=body.timestamp,
        offsets={int(q): o for q, o in body.offsets.items()} if body.offsets else None,
        dry_run=body.dry_run,
    )
    return offset_reset_out(await broker.offset_reset.reset(group, request))


@router.get(
    "/v1/groups/{group}/dlq/messages",
    tags=["groups"],
    operation_id="listDeadLetters",
    summary="Browse a group's dead-letter queue",
    description=(
        "A page of at most `limit` messages whose bodies add up to at most the server's "
        "pull byte cap (`max_pull_bytes`, 8 MiB by default; the first message always); "
        "`next_offset` continues."
    ),
    response_model=DeadLetterPage,
    responses=problems(400, 422, 503),
)
async def list_dead_letters(
    group: GroupPath,
    broker: BrokerDep,
    request: Request,
    offset: Annotated[
        int | None, Query(ge=0, le=INT64_MAX, description="Start here; default: the oldest.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Most messages to return.")] = 50,
    tags: Annotated[list[str] | None, Query(max_length=64, description="Only these tags.")] = None,
    begin_timestamp: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
    end_timestamp: Annotated[int | None, Query(ge=0, le=INT64_MAX)] = None,
    body_encoding: BodyEncodingQuery = "auto",
) -> DeadLetterPage:
    check_group_name(group)
    selection = DlqFilter(tags=tuple(tags or ()), begin_ms=begin_timestamp, end_ms=end_timestamp)
    max_bytes = request.app.state.settings.max_pull_bytes
    page = broker.dlq.browse(group, offset, limit, selection, max_bytes)
    return dead_letter_page_out(group, dlq_topic(group), page, body_encoding)


@router.post(
    "/v1/groups/{group}/dlq/redrive",
    tags=["groups"],
    operation_id="redriveDeadLetters",
    summary="Send dead letters back to their topic (or another) — preview with dry_run",
    description=(
        "Each selected dead letter is re-sent with `reconsume_times` 0 and a `REDRIVEN_FROM` "
        "property; the answer lists every message's outcome. Dead letters are not removed, so "
        "a run that stops midway loses nothing, and running it again does not send twice "
        "(ALREADY_MOVED)."
    ),
    response_model=RedriveOut,
    responses=problems(400, 403, 404, 413, 422, 503),
)
async def redrive_dead_letters(group: GroupPath, body: RedriveIn, broker: BrokerDep) -> RedriveOut:
    check_group_name(group)
    selection = DlqFilter(
        msg_ids=frozenset(body.msg_ids),
        tags=frozenset(body.tags),
        begin_ms=body.begin_timestamp,
        end_ms=body.end_timestamp,
    )
    report = await broker.dlq.redrive(
        group,
        selection,
        target_topic=body.target_topic,
        dry_run=body.dry_run,
        limit=body.limit,
        rate_per_s=body.rate_per_second,
    )
    return redrive_out(report)


@router.get(
    "/v1/topics/{topic}/queues/{queue_id}/offset",
    tags=["topics"],
    operation_id="getOffsetByTime",
    summary="The first offset of a queue stored at or after a time",
    response_model=QueueSeekOut,
    responses=problems(400, 403, 404, 422, 503),
)
async def offset_by_time(
    topic: TopicPath,
    queue_id: QueueIdPath,
    broker: BrokerDep,
    timestamp: Annotated[int, Query(ge=0, le=INT64_MAX, description="ms since the epoch.")],
) -> QueueSeekOut:
    return queue_seek_out(
        topic, timestamp, broker.topics.offset_by_time(topic, queue_id, timestamp)
    )


@router.get(
    "/v1/delays",
    tags=["messages"],
    operation_id="getDelayLevels",
    summary="Delay levels: their delays and how many messages wait in each",
    response_model=DelayLevelsOut,
    responses=problems(503),
)
async def delay_levels(broker: BrokerDep) -> DelayLevelsOut:
    return delay_levels_out(broker.scheduler.progress())
