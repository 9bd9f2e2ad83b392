"""Proxy endpoint for timer messages: a cancel goes to the broker group holding the message.

A timed send goes through the proxy as any send (its ``deliver_at`` rides in the body), and
its receipt's ``timer_handle`` names the broker that stored it; the cancel is forwarded to
that broker's group (its master now), or, for a topic of one group, to that group.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.proxy.context import cluster_view, forwarder
from app.proxy.forward import broker_path
from app.proxy.schemas import ClusterTimerCancelOut
from app.routes.params import TopicPath
from app.routes.timers import TimerHandlePath
from services.cluster import master_of, timer_group

router = APIRouter(tags=["messages"])


@router.delete(
    "/v1/topics/{topic}/timers/{handle}",
    operation_id="cancelTimer",
    summary="Cancel a timer message before it is delivered, at the group that holds it",
    description="The handle names the broker group that stored the message; the cancel goes "
    "to that group's master now.",
    response_model=ClusterTimerCancelOut,
)
async def cancel_timer(topic: TopicPath, handle: TimerHandlePath, request: Request) -> Response:
    view = cluster_view(request)
    group = timer_group(view, topic, handle)
    answer = await forwarder(request).call(
        master_of(view, group),
        "DELETE",
        broker_path("v1", "topics", topic, "timers", handle),
        request=request,
    )
    if not answer.ok or not answer.content:
        return answer.response()
    return answer.with_body({**answer.json(), "broker_group": group})
