"""POP consumption: competing consumers receive, ack, and change a message's invisibility."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.deps import BrokerDep, SettingsDep, disconnect_watch, note_consumer
from app.labels import on_receive, requested
from app.responses import OrjsonResponse
from app.routes.params import AfterInFlightQuery, GroupPath, PageLimitQuery, TopicPath
from app.schemas.pop import (
    AckIn,
    AckResponse,
    InFlightListResponse,
    InvisibilityIn,
    InvisibilityOut,
    ReceiveIn,
    ReceiveResponse,
    ack_out,
    in_flight_list_out,
    invisibility_out,
    parse_in_flight_cursor,
    receive_out,
)
from services import ReceiveOptions, check_group_name, in_flight_page

router = APIRouter(tags=["groups"])


@router.post(
    "/v1/groups/{group}/topics/{topic}/receive",
    operation_id="receiveMessages",
    summary="Receive messages for a group of competing workers (POP): ack each one",
    description=(
        "Takes up to `max_messages` from the topic's queues (a rotating start, so none "
        "starves) and the group's retry topic; they stay invisible to every other receiver "
        "for `invisible_ms`. Ack each with its `receipt_handle`; what is not acked in time "
        "comes back with `delivery_attempt` + 1, and after the group's `retry_max_times` "
        "goes to `%DLQ%<group>`. An empty long-poll answers 200 with no messages. A group "
        "consumes either by offsets (pull + commit) or by receive/ack: mixing answers 409."
    ),
    response_model=ReceiveResponse,
)
async def receive_messages(
    group: GroupPath,
    topic: TopicPath,
    body: ReceiveIn,
    broker: BrokerDep,
    settings: SettingsDep,
    request: Request,
) -> Response:
    check_group_name(group)
    options = ReceiveOptions(
        max_messages=body.max_messages,
        wait_ms=body.wait_ms,
        invisible_ms=body.invisible_ms,
        tags=body.tags,
        max_bytes=settings.max_pull_bytes,
        sql=body.filter,
    )
    labels = requested(request, topic)
    note_consumer(request)
    received = await broker.pop.receive(
        group,
        topic,
        options,
        holder=str(getattr(request.state, "principal", "") or ""),
        abandon=disconnect_watch(request) if body.wait_ms else None,
    )
    out = receive_out(received, body.body_encoding)
    if labels is not None:
        return OrjsonResponse(out, headers=on_receive(out, labels))
    return OrjsonResponse(out)


@router.post(
    "/v1/groups/{group}/acks",
    operation_id="ackMessages",
    summary="Ack received messages by receipt handle (a batch; an outcome per handle)",
    description=(
        "`acked`: done, it never comes back. `expired`: its invisibility ran out and it may be "
        "with someone else now; the ack removes nothing. `invalid`: not a handle this store "
        "issued for this group, or one replaced by a change of invisibility. The answer comes "
        "once the ACK record is durable (SYNC flush)."
    ),
    response_model=AckResponse,
)
async def ack_messages(
    group: GroupPath, body: AckIn, broker: BrokerDep, request: Request
) -> Response:
    note_consumer(request)
    check_group_name(group)
    return OrjsonResponse(ack_out(group, await broker.pop.ack(group, body.receipt_handles)))


@router.post(
    "/v1/groups/{group}/invisibility",
    operation_id="changeInvisibility",
    summary="Extend (or end) one received message's invisibility; answers a new handle",
    description=(
        "RocketMQ's changeInvisibleTime: the message stays invisible for `invisible_ms` from "
        "now, and the answer carries a new receipt handle — the old one stops working. "
        "`invisible_ms: 0` gives it back: it returns after the group's retry delay for its "
        "attempt (the delay levels), or goes to the DLQ after `retry_max_times`. An expired "
        "handle answers 409 `RECEIPT_HANDLE_EXPIRED`; a bad one 400 `INVALID_RECEIPT_HANDLE`."
    ),
    response_model=InvisibilityOut,
)
async def change_invisibility(
    group: GroupPath, body: InvisibilityIn, broker: BrokerDep, request: Request
) -> InvisibilityOut:
    check_group_name(group)
    labels = requested(request, "")
    note_consumer(request)
    change = await broker.pop.change_invisibility(group, body.receipt_handle, body.invisible_ms)
    out = invisibility_out(change)
    if labels is not None and out.receipt_handle is not None:
        out.receipt_handle = labels.handle(out.receipt_handle)
    return out


@router.get(
    "/v1/groups/{group}/in-flight",
    operation_id="listInFlight",
    summary="A page of the group's received, not yet acked messages",
    description=(
        "By topic, queue id and offset: at most `limit` after `after`; `next_after` "
        "continues, `total` counts every message in flight for the group. A message acked "
        "or returned between two pages is simply not listed again."
    ),
    response_model=InFlightListResponse,
)
async def list_in_flight(
    group: GroupPath,
    broker: BrokerDep,
    limit: PageLimitQuery = 100,
    after: AfterInFlightQuery = None,
) -> InFlightListResponse:
    broker.groups.get(group)
    key = parse_in_flight_cursor(after) if after is not None else None
    return in_flight_list_out(group, in_flight_page(broker.pop.table, group, key, limit))
