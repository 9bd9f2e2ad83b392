"""Topics: config CRUD and per-queue offsets."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from app.deps import BrokerDep, ClusterDep
from app.routes.params import (
    AfterNameQuery,
    PageLimitQuery,
    TopicPath,
    name_page_description,
    next_after,
)
from app.schemas import (
    TopicDetailOut,
    TopicIn,
    TopicListResponse,
    topic_detail_out,
    topic_out,
)

router = APIRouter(tags=["topics"])


@router.get(
    "/v1/topics",
    operation_id="listTopics",
    summary="A page of topic configs, by name",
    description=name_page_description("topic"),
    response_model=TopicListResponse,
)
async def list_topics(
    broker: BrokerDep, limit: PageLimitQuery = 100, after: AfterNameQuery = None
) -> TopicListResponse:
    configs, total = broker.topics.page(after, limit)
    return TopicListResponse(
        topics=[topic_out(t) for t in configs],
        total=total,
        next_after=next_after([t.topic_name for t in configs], limit),
    )


@router.get(
    "/v1/topics/{topic}",
    operation_id="getTopic",
    summary="A topic config with each queue's min/max offset and last store time",
    response_model=TopicDetailOut,
)
async def get_topic(topic: TopicPath, broker: BrokerDep) -> TopicDetailOut:
    topics = broker.topics
    config = topics.get(topic)
    return topic_detail_out(config, topics.queue_stats(config))


@router.put(
    "/v1/topics/{topic}",
    operation_id="putTopic",
    summary="Create or replace a topic config",
    response_model=TopicDetailOut,
    responses={
        201: {"model": TopicDetailOut, "description": "Created"},
    },
)
async def put_topic(
    topic: TopicPath,
    body: TopicIn,
    broker: BrokerDep,
    member: ClusterDep,
    response: Response,
) -> TopicDetailOut:
    topics = broker.topics
    config, created = await topics.put(
        topic,
        read_queue_nums=body.read_queue_nums,
        write_queue_nums=body.write_queue_nums,
        perm=body.perm,
        order=body.order,
        trace=body.trace,
    )
    if member is not None:  # the route is readable anywhere once the PUT is answered
        await member.ensure_topic_route(config.topic_name, config.read_queue_nums)
    if created:
        response.status_code = 201
    return topic_detail_out(config, topics.queue_stats(config))


@router.delete(
    "/v1/topics/{topic}",
    operation_id="deleteTopic",
    summary="Delete a topic config, its queues and every group's offsets on it",
    status_code=204,
    response_class=Response,
)
async def delete_topic(topic: TopicPath, broker: BrokerDep) -> Response:
    await broker.topics.delete(topic)
    return Response(status_code=204)
