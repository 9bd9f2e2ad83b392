"""A message's trace: its timeline of events and each group's state."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.schemas.common import ResponseBody
from services import Consumer, GroupState, Timeline, TraceEvent


class TraceConsumerOut(ResponseBody):
    token: str | None = Field(description="The name of the consumer's token (with auth on).")
    address: str | None = Field(description="The consumer's ip:port.")
    client_id: str | None = Field(description="Its X-Client-Id header.")


class TraceEventOut(ResponseBody):
    type: str = Field(
        description="stored, timer_scheduled, timer_fired, timer_cancelled, transaction_half, "
        "transaction_commit, transaction_rollback, transaction_checked, transaction_gave_up, "
        "delivered, acked, nacked, invisibility_changed, revived, sent_back, dead_lettered or "
        "redriven."
    )
    at: int = Field(description="Ms since the epoch, the broker's clock, when it happened.")
    msg_id: str = Field(description="The message's UNIQ_KEY (the same for its copies).")
    topic: str = Field(description="The topic of the copy concerned.")
    queue_id: int
    queue_offset: int
    group: str | None
    attempt: int | None = Field(description="The delivery attempt (1 = first), for deliveries.")
    consumer: TraceConsumerOut | None
    detail: dict[str, Any] = Field(description="Type-specific facts (see the README).")


class TraceGroupOut(ResponseBody):
    group: str
    state: str = Field(
        description="acked, in_flight, retrying, waiting, dead_lettered or consumed (the "
        "group's offset is past the message, and no event of it was traced)."
    )
    gap: str | None = Field(description="What has not happened yet, in words.")


class TimelineOut(ResponseBody):
    msg_id: str
    topic: str
    events: list[TraceEventOut] = Field(description="By time, then by a fixed order of types.")
    groups: list[TraceGroupOut]
    tracing: Literal["on", "off", "sampled_out"] = Field(
        description="Whether the message's topic is traced, and the sampling took it."
    )


def _consumer_out(consumer: Consumer | None) -> TraceConsumerOut | None:
    if consumer is None:
        return None
    return TraceConsumerOut(
        token=consumer.token, address=consumer.address, client_id=consumer.client_id
    )


def trace_event_out(event: TraceEvent) -> TraceEventOut:
    return TraceEventOut(
        type=event.type,
        at=event.at,
        msg_id=event.msg_id,
        topic=event.topic,
        queue_id=event.queue_id,
        queue_offset=event.queue_offset,
        group=event.group,
        attempt=event.attempt,
        consumer=_consumer_out(event.consumer),
        detail=dict(event.detail),
    )


def _group_out(state: GroupState) -> TraceGroupOut:
    return TraceGroupOut(group=state.group, state=state.state, gap=state.gap)


def timeline_out(timeline: Timeline) -> TimelineOut:
    tracing: Literal["on", "off", "sampled_out"] = (
        "on" if timeline.tracing == "on" else "off" if timeline.tracing == "off" else "sampled_out"
    )
    return TimelineOut(
        msg_id=timeline.msg_id,
        topic=timeline.topic,
        events=[trace_event_out(e) for e in timeline.events],
        groups=[_group_out(g) for g in timeline.groups],
        tracing=tracing,
    )
