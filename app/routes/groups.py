"""Consumer groups: config CRUD, group pull across queues, offsets and lag."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.deps import BrokerDep, note_consumer
from app.labels import on_group_pull, requested
from app.responses import OrjsonResponse
from app.routes.messages import long_poll
from app.routes.params import (
    AfterNameQuery,
    GroupPath,
    PageLimitQuery,
    QueueIdPath,
    TopicPath,
    name_page_description,
    next_after,
)
from app.schemas import (
    TOPIC_MAX_LENGTH,
    CommittedOffsetOut,
    GroupIn,
    GroupListResponse,
    GroupOffsetsResponse,
    GroupOut,
    GroupPullQuery,
    GroupPullResponse,
    OffsetBatchIn,
    OffsetCommitIn,
    OffsetCommitResponse,
    group_offsets_out,
    group_out,
    group_pull_out,
)
from services import (
    CONSUME_FROM_EARLIEST,
    CONSUME_FROM_LATEST,
    OffsetCommit,
    SubscriptionGroupConfig,
    in_flight_by_queue,
)

router = APIRouter(tags=["groups"])


@router.get(
    "/v1/groups",
    operation_id="listGroups",
    summary="A page of consumer group configs, by name",
    description=name_page_description("group"),
    response_model=GroupListResponse,
)
async def list_groups(
    broker: BrokerDep, limit: PageLimitQuery = 100, after: AfterNameQuery = None
) -> GroupListResponse:
    configs, total = broker.groups.page(after, limit)
    return GroupListResponse(
        groups=[group_out(g) for g in configs],
        total=total,
        next_after=next_after([g.group_name for g in configs], limit),
    )


@router.get(
    "/v1/groups/{group}",
    operation_id="getGroup",
    summary="One consumer group config",
    response_model=GroupOut,
)
async def get_group(group: GroupPath, broker: BrokerDep) -> GroupOut:
    return group_out(broker.groups.get(group))


@router.put(
    "/v1/groups/{group}",
    operation_id="putGroup",
    summary="Create or replace a consumer group config",
    response_model=GroupOut,
    responses={
        201: {"model": GroupOut, "description": "Created"},
    },
)
async def put_group(
    group: GroupPath, body: GroupIn, broker: BrokerDep, response: Response
) -> GroupOut:
    if body.consume_from == "timestamp":
        consume_from = str(body.consume_from_timestamp or 0)
    elif body.consume_from == "latest":
        consume_from = CONSUME_FROM_LATEST
    else:
        consume_from = CONSUME_FROM_EARLIEST
    config = SubscriptionGroupConfig(
        group,
        consume_enable=body.consume_enable,
        retry_queue_nums=body.retry_queue_nums,
        retry_max_times=body.retry_max_times,
        consume_from=consume_from,
        consume_mode=body.consume_mode or "",
        fifo=body.fifo,
        filters=body.filters,
    )
    if await broker.groups.put(config):
        response.status_code = 201
    return group_out(config)


@router.delete(
    "/v1/groups/{group}",
    operation_id="deleteGroup",
    summary="Delete a consumer group config and its offsets",
    status_code=204,
    response_class=Response,
)
async def delete_group(group: GroupPath, broker: BrokerDep) -> Response:
    await broker.groups.delete(group)
    return Response(status_code=204)


@router.get(
    "/v1/groups/{group}/topics/{topic}/messages",
    operation_id="pullGroupMessages",
    summary="Pull for a group from every readable queue of a topic",
    description=(
        "Reads from the group's committed offsets; a queue the group never committed starts "
        "at its min offset (or the max offset for `consume_from=latest`, or by time). Messages "
        "carry queue id and offset; commit `queues[].next_offset` to acknowledge."
    ),
    response_model=GroupPullResponse,
)
async def pull_group_messages(
    group: GroupPath,
    topic: TopicPath,
    query: Annotated[GroupPullQuery, Query()],
    broker: BrokerDep,
    request: Request,
) -> Response:
    options, abandon = long_poll(query, request)
    labels = requested(request, topic)
    note_consumer(request)
    pulled = await broker.pull.pull_group(
        group, topic, options, auto_commit=query.auto_commit, abandon=abandon
    )
    out = group_pull_out(pulled, query.body_encoding)
    if labels is not None:
        return OrjsonResponse(out, headers=on_group_pull(out, labels))
    return OrjsonResponse(out)


@router.put(
    "/v1/groups/{group}/topics/{topic}/queues/{queue_id}/offset",
    operation_id="commitOffset",
    summary="Commit one queue's offset (the next offset to consume)",
    response_model=OffsetCommitResponse,
)
async def commit_offset(
    group: GroupPath,
    topic: TopicPath,
    queue_id: QueueIdPath,
    body: OffsetCommitIn,
    broker: BrokerDep,
    request: Request,
) -> OffsetCommitResponse:
    labels = requested(request, topic)
    note_consumer(request)
    await broker.offsets.commit(group, [OffsetCommit(topic, queue_id, body.offset)])
    answered = queue_id if labels is None else labels.queue_id(queue_id)
    return OffsetCommitResponse(
        group=group,
        offsets=[CommittedOffsetOut(topic=topic, queue_id=answered, offset=body.offset)],
    )


@router.post(
    "/v1/groups/{group}/offsets",
    operation_id="commitOffsets",
    summary="Commit several offsets (all are checked before any is stored)",
    response_model=OffsetCommitResponse,
)
async def commit_offsets(
    group: GroupPath, body: OffsetBatchIn, broker: BrokerDep, request: Request
) -> OffsetCommitResponse:
    note_consumer(request)
    commits = [OffsetCommit(o.topic, o.queue_id, o.offset) for o in body.offsets]
    await broker.offsets.commit(group, commits)
    return OffsetCommitResponse(
        group=group,
        offsets=[
            CommittedOffsetOut(topic=c.topic, queue_id=c.queue_id, offset=c.offset) for c in commits
        ],
    )


@router.get(
    "/v1/groups/{group}/offsets",
    operation_id="getGroupOffsets",
    summary="Committed offset, max offset and lag per topic and queue",
    response_model=GroupOffsetsResponse,
)
async def get_group_offsets(
    group: GroupPath,
    broker: BrokerDep,
    topic: Annotated[
        str | None,
        Query(min_length=1, max_length=TOPIC_MAX_LENGTH, description="Only this topic."),
    ] = None,
) -> GroupOffsetsResponse:
    report = broker.offsets.report(group, topic)
    return group_offsets_out(group, report, in_flight_by_queue(broker.pop.table, group))
