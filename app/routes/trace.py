"""Message trace: a message's timeline, by its id or by a business key."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from starlette.responses import Response

from app.deps import BrokerDep
from app.responses import OrjsonResponse
from app.routes.params import MessageIdPath
from app.schemas.trace import TimelineOut, timeline_out

router = APIRouter(tags=["messages"])

TRACE_DESCRIPTION = (
    "The steps of the message's life the broker traced, in order: stored, timer and "
    "transaction steps, each group's deliveries (with the attempt and the consumer) and their "
    "outcomes (acked, nacked, invisibility changed, revived), sent back, dead-lettered, "
    "redriven. Each group that consumes the topic gets a state and, when something has not "
    "happened yet, a gap in words. A pull delivery shows once the group's offset commit "
    "covers it; a POP delivery once it is acked, nacked, changed or revived. A message of a "
    "topic with tracing off answers its groups' live state and `tracing: off`."
)

MessageIdOrKey = Annotated[
    str,
    Query(min_length=1, max_length=255, description="A business key (KEYS) or a UNIQ_KEY."),
]


@router.get(
    "/v1/messages/trace",
    operation_id="getMessageTraceByKey",
    summary="The trace of the message a business key names",
    description=TRACE_DESCRIPTION + " The first traced message with the key is answered.",
    response_model=TimelineOut,
)
async def get_message_trace_by_key(key: MessageIdOrKey, broker: BrokerDep) -> Response:
    return OrjsonResponse(timeline_out(broker.services.trace.by_key(key)).model_dump())


@router.get(
    "/v1/messages/{msg_id}/trace",
    operation_id="getMessageTrace",
    summary="The trace of one message: its timeline and each group's state",
    description=TRACE_DESCRIPTION,
    response_model=TimelineOut,
)
async def get_message_trace(msg_id: MessageIdPath, broker: BrokerDep) -> Response:
    return OrjsonResponse(timeline_out(broker.services.trace.by_id(msg_id)).model_dump())
