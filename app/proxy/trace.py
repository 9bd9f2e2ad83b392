"""Proxy endpoints for message trace: one timeline from every broker group's part of it.

A message's trace events are written where its steps happened: its send, timer and
transaction steps and its deliveries from its own topic by the group that stored it; its
retries by the group holding the consumer group's retry topic, its dead letter by the one
holding the DLQ, a redriven copy's life by the group that stored the copy. Any of them may
be another broker group, so a lookup asks every group (a master, or a slave when the master
does not answer: after a failover the new master, or the replica that kept the records) and
merges their answers: each event once, in time order, and for each consumer group the state
of the broker that saw its latest step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.proxy.context import cluster_view, forwarder
from app.proxy.fanout import read_every_group
from app.proxy.forward import BrokerAnswer, ProxyError, broker_path
from app.responses import OrjsonResponse
from app.routes.params import MessageIdPath
from app.routes.trace import TRACE_DESCRIPTION, MessageIdOrKey
from app.schemas.trace import TimelineOut
from services.cluster import NoMasterError

router = APIRouter(tags=["messages"])

STATE_RANK: Final = {
    "waiting": 0,
    "retrying": 1,
    "in_flight": 2,
    "consumed": 3,
    "dead_lettered": 4,
    "acked": 5,
}
"""How far a group has come with the message, for groups no broker has an event of."""

IDENTITY_FIELDS: Final = (
    "type",
    "at",
    "msg_id",
    "topic",
    "queue_id",
    "queue_offset",
    "group",
    "attempt",
)

TRACING_RANK: Final = {"off": 0, "sampled_out": 1, "on": 2}

MERGE_NOTE: Final = (
    " Through the proxy every broker group is asked (the message's retry, dead-letter and "
    "redriven copies may live in other groups than the message) and the answers are merged: "
    "each event once, in time order."
)


def event_identity(event: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two events the same step (two replicas or two lookups may both hold it)."""
    return tuple(event.get(name) for name in IDENTITY_FIELDS)


def merged_events(timelines: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every event of every timeline once, by time; events of the same millisecond keep the
    order their broker gave them (each broker's list is in the fixed order of types)."""
    seen: set[tuple[Any, ...]] = set()
    events: list[dict[str, Any]] = []
    for timeline in timelines:
        for event in timeline.get("events") or ():
            identity = event_identity(event)
            if identity not in seen:
                seen.add(identity)
                events.append(event)
    events.sort(key=lambda e: int(e.get("at") or 0))  # stable: each broker's order kept
    return events


def _latest_step(timeline: dict[str, Any], group: str) -> int:
    """When the timeline's last event of ``group`` happened (-1: it has none)."""
    times = [int(e["at"]) for e in timeline.get("events") or () if e.get("group") == group]
    return max(times, default=-1)


def merged_groups(timelines: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each consumer group once: the state of the broker that saw the group's latest step,
    else the state furthest along."""
    chosen: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
    for timeline in timelines:
        for state in timeline.get("groups") or ():
            name = str(state.get("group"))
            rank = (_latest_step(timeline, name), STATE_RANK.get(str(state.get("state")), -1))
            if name not in chosen or rank > chosen[name][0]:
                chosen[name] = (rank, state)
    return [chosen[name][1] for name in sorted(chosen)]


def own_timeline(timelines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The answer of the group that stored the message (it has the ``stored`` event), else
    the first. An offsetMsgId names a CommitLog position, so two groups may each hold a
    message under it: the first group's is taken, as a lookup of the message is answered."""
    return next(
        (t for t in timelines if any(e.get("type") == "stored" for e in t.get("events") or ())),
        timelines[0],
    )


def merged_timeline(timelines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One answer from the timelines of several broker groups (at least one): those of the
    message the group that stored it names (its UNIQ_KEY), merged."""
    own = own_timeline(timelines)
    mine = [t for t in timelines if t.get("msg_id") == own.get("msg_id")]
    tracing = max((str(t.get("tracing")) for t in mine), key=lambda v: TRACING_RANK.get(v, 0))
    return {
        "msg_id": own.get("msg_id"),
        "topic": own.get("topic"),
        "events": merged_events(mine),
        "groups": merged_groups(mine),
        "tracing": tracing,
    }


class RefusedByBroker(Exception):
    """A broker's refusal, passed on as it came."""

    def __init__(self, answer: BrokerAnswer) -> None:
        super().__init__(answer.status)
        self.answer = answer


async def timelines_of(
    request: Request, path: str, query: bytes, what: str
) -> list[dict[str, Any]]:
    """Every broker group's timeline at ``path`` with ``query`` (of the groups that have
    one); a refusal of the request itself is raised as the broker gave it, and
    MESSAGE_NOT_FOUND when no group has one."""
    view = cluster_view(request)

    answers = await read_every_group(
        forwarder(request), view, sorted(view.groups), path, request=request, query=query
    )
    found: list[dict[str, Any]] = []
    missing: BrokerAnswer | None = None
    for _, answer in answers:
        if isinstance(answer, ProxyError | NoMasterError):
            continue
        if answer.ok:
            found.append(answer.json())
        elif answer.status != 404:
            raise RefusedByBroker(answer)  # the request itself is wrong: every group says so
        else:
            missing = missing or answer
    if not found:
        if missing is not None:
            raise RefusedByBroker(missing)
        raise ProxyError("MESSAGE_NOT_FOUND", f"no broker group has a trace of {what}")
    return found


async def merged_lookup(request: Request, path: str, what: str) -> Response:
    """Ask every group at ``path``; when what was asked is not the message's UNIQ_KEY (an
    offsetMsgId, a business key), ask every group again by the UNIQ_KEY the message's own
    group answered: the groups of its retry, dead-letter and redriven copies know it by
    that id only."""
    try:
        found = await timelines_of(request, path, request.scope["query_string"], what)
        msg_id = own_timeline(found).get("msg_id")
        if isinstance(msg_id, str) and msg_id != what:
            by_id = broker_path("v1", "messages", msg_id, "trace")
            found = await timelines_of(request, by_id, b"", msg_id)
    except RefusedByBroker as refused:
        return refused.answer.response()
    return OrjsonResponse(merged_timeline(found))


@router.get(
    "/v1/messages/trace",
    operation_id="getMessageTraceByKey",
    summary="The trace of the message a business key names, from every group",
    description=TRACE_DESCRIPTION + MERGE_NOTE,
    response_model=TimelineOut,
)
async def get_message_trace_by_key(key: MessageIdOrKey, request: Request) -> Response:
    return await merged_lookup(request, broker_path("v1", "messages", "trace"), key)


@router.get(
    "/v1/messages/{msg_id}/trace",
    operation_id="getMessageTrace",
    summary="The trace of one message: its timeline and each group's state, from every group",
    description=TRACE_DESCRIPTION + MERGE_NOTE,
    response_model=TimelineOut,
)
async def get_message_trace(msg_id: MessageIdPath, request: Request) -> Response:
    return await merged_lookup(request, broker_path("v1", "messages", msg_id, "trace"), msg_id)
