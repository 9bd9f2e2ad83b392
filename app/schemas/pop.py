"""Request and response bodies of POP consumption: receive, ack, change of invisibility."""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field

from app.schemas.common import (
    FILTER_RULES,
    TOPIC_MAX_LENGTH,
    FilterType,
    JsonInt,
    PageBody,
    RequestBody,
    ResponseBody,
    SqlFilter,
)
from app.schemas.messages import MessageOut, message_out
from services import (
    DEFAULT_INVISIBLE_MS,
    MAX_HANDLE_LENGTH,
    MAX_INVISIBLE_MS,
    MAX_RECEIVE_MESSAGES,
    MIN_INVISIBLE_MS,
    AckResult,
    InFlightKey,
    InFlightPage,
    InvisibilityChange,
    Received,
)

MAX_ACK_HANDLES = 256
# An in-flight list cursor: `<topic>:<queue id>:<offset>` (a topic name has no `:`).
IN_FLIGHT_CURSOR_PATTERN = rf"^[%|a-zA-Z0-9_-]{{1,{TOPIC_MAX_LENGTH}}}:[0-9]{{1,4}}:[0-9]{{1,19}}$"


class ReceiveIn(RequestBody):
    max_messages: JsonInt = Field(default=16, ge=1, le=MAX_RECEIVE_MESSAGES)
    wait_ms: JsonInt = Field(
        default=0, ge=0, le=30_000, description="Long-poll this long when nothing is there."
    )
    invisible_ms: JsonInt = Field(
        default=DEFAULT_INVISIBLE_MS,
        ge=MIN_INVISIBLE_MS,
        le=MAX_INVISIBLE_MS,
        description="How long the messages stay invisible to everyone else (1 s to 12 h).",
    )
    tags: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="`*` or `A||B`: only messages with these tags (retries always pass).",
    )
    filter: SqlFilter | None = Field(default=None, description=FILTER_RULES)
    filter_type: FilterType = Field(
        default="sql92", description="The language of `filter`: `sql92` (RocketMQ's)."
    )
    body_encoding: Literal["auto", "base64"] = "auto"


class ReceivedMessageOut(MessageOut):
    receipt_handle: str = Field(description="Ack it, or change its invisibility, with this.")
    delivery_attempt: int = Field(description="1 on the first delivery.")
    invisible_until: int = Field(description="Ms since the epoch; then it may come back.")


class ReceiveResponse(ResponseBody):
    group: str
    topic: str
    messages: list[ReceivedMessageOut]


def receive_out(received: Received, encoding: str) -> dict[str, object]:
    messages = []
    for item in received.messages:
        out = message_out(item.message, encoding)
        if item.queue_topic != item.message.topic:
            out["queue_topic"] = item.queue_topic
        out["receipt_handle"] = item.receipt_handle
        out["delivery_attempt"] = item.delivery_attempt
        out["invisible_until"] = item.invisible_until_ms
        messages.append(out)
    return {"group": received.group, "topic": received.topic, "messages": messages}


RECEIPT_HANDLE_PATTERN: Final = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22}$"
"""A receipt handle's shape: base64url of what it names, a dot, base64url of its 16-byte MAC
(only the broker that signed it can tell a genuine one)."""
_RECEIPT_HANDLE_DESCRIPTION: Final = "A receipt handle a receive answered (opaque, signed)."


class AckIn(RequestBody):
    receipt_handles: list[str] = Field(
        min_length=1,
        max_length=MAX_ACK_HANDLES,
        description="Receipt handles a receive answered; each is answered on its own (one that "
        "is not a current handle of the group is `invalid`).",
    )


class AckOutcomeOut(ResponseBody):
    receipt_handle: str
    outcome: Literal["acked", "expired", "invalid"] = Field(
        description=(
            "`acked`: done. `expired`: its invisibility ran out, the message may be with "
            "someone else (nothing was removed). `invalid`: not a current handle of this group."
        )
    )
    detail: str = ""


class AckResponse(ResponseBody):
    group: str
    results: list[AckOutcomeOut]


PROXY_HANDLE_DESCRIPTION: Final = (
    "A receipt handle a receive through the proxy answered: `<broker group>~<the broker's "
    "handle>`, so any proxy of the cluster sends it to the group that issued it."
)


class ClusterReceivedMessageOut(ReceivedMessageOut):
    queue_id: int = Field(
        description="A cluster-wide queue id (of a retry-topic message, with `queue_topic`: "
        "its broker group's own)."
    )
    receipt_handle: str = Field(description=PROXY_HANDLE_DESCRIPTION)
    broker_group: str = Field(description="The broker group that handed it out.")


class ClusterReceiveResponse(ResponseBody):
    """A receive through the proxy: what every broker group handed out, each message named
    by its group."""

    group: str
    topic: str
    messages: list[ClusterReceivedMessageOut]


class ClusterAckIn(RequestBody):
    receipt_handles: list[str] = Field(
        min_length=1,
        max_length=MAX_ACK_HANDLES,
        description="Receipt handles a receive through the proxy answered "
        "(`<broker group>~<handle>`), of any groups; each is answered on its own.",
    )


class ClusterInvisibilityIn(RequestBody):
    receipt_handle: str = Field(min_length=1, description=PROXY_HANDLE_DESCRIPTION)
    invisible_ms: JsonInt = Field(
        ge=0,
        le=MAX_INVISIBLE_MS,
        description="New invisibility from now; 0 gives the message back now.",
    )


class ClusterInvisibilityOut(ResponseBody):
    receipt_handle: str | None = Field(
        description="The new handle, naming the same group (the old one stops working); null "
        "when given back."
    )
    invisible_until: int = Field(description="Ms since the epoch when it becomes visible again.")


class ClusterAckOutcomeOut(ResponseBody):
    """One handle's outcome of an ack through the proxy: a broker's, or ``failed``."""

    receipt_handle: str
    outcome: Literal["acked", "expired", "invalid", "failed"] = Field(
        description=(
            "`acked`, `expired`, `invalid`: the broker group's answer, as a broker gives it. "
            "`failed`: its broker group did not take the ack (`code` says why); the handle is "
            "still current unless its invisibility ran out, so the ack may be sent again."
        )
    )
    detail: str = ""
    code: str | None = Field(
        default=None,
        description=(
            "A `failed` handle's problem code: `BROKER_UNAVAILABLE` (its group's master does "
            "not answer, or answered nothing: an ack sent again is harmless), `NO_MASTER`, or "
            "the code of the broker's refusal. Null for every other outcome."
        ),
    )


class ClusterAckResponse(ResponseBody):
    """An ack through the proxy: the broker's answer, plus ``failed`` handles."""

    group: str
    results: list[ClusterAckOutcomeOut] = Field(description="One per handle, in order.")


def ack_out(group: str, results: list[AckResult]) -> dict[str, object]:
    """The answer as plain JSON (every worker acks every message it receives)."""
    return {
        "group": group,
        "results": [
            {
                "receipt_handle": r.receipt_handle[:MAX_HANDLE_LENGTH],
                "outcome": r.outcome.value,
                "detail": r.detail,
            }
            for r in results
        ],
    }


class InvisibilityIn(RequestBody):
    receipt_handle: str = Field(
        min_length=1,
        max_length=MAX_HANDLE_LENGTH,
        description=_RECEIPT_HANDLE_DESCRIPTION,
        json_schema_extra={"pattern": RECEIPT_HANDLE_PATTERN},
    )
    invisible_ms: JsonInt = Field(
        ge=0,
        le=MAX_INVISIBLE_MS,
        description="New invisibility from now; 0 gives the message back now.",
    )


class InvisibilityOut(ResponseBody):
    receipt_handle: str | None = Field(
        description="The new handle (the old one stops working); null when given back."
    )
    invisible_until: int = Field(description="Ms since the epoch when it becomes visible again.")


def invisibility_out(change: InvisibilityChange) -> InvisibilityOut:
    return InvisibilityOut(
        receipt_handle=change.receipt_handle, invisible_until=change.invisible_until_ms
    )


class InFlightOut(ResponseBody):
    topic: str
    queue_id: int
    offset: int = Field(description="The message's offset in its queue.")
    delivery_attempt: int = Field(description="1 on the first delivery.")
    holder: str | None = Field(
        description="The name of the token that received it, where auth is on; else null."
    )
    invisible_until: int = Field(
        description="Ms since the epoch when it comes back unless acked (FIFO: once due, it "
        "waits for the next receive)."
    )
    due: bool = Field(description="FIFO: its invisibility ended; the next receive takes it.")


class InFlightListResponse(PageBody):
    group: str
    messages: list[InFlightOut] = Field(description="By topic, queue id and offset.")


def in_flight_cursor(key: InFlightKey) -> str:
    topic, queue_id, offset = key
    return f"{topic}:{queue_id}:{offset}"


def parse_in_flight_cursor(cursor: str) -> InFlightKey:
    """The key of a cursor that matched :data:`IN_FLIGHT_CURSOR_PATTERN`."""
    topic, queue_id, offset = cursor.rsplit(":", 2)
    return topic, int(queue_id), int(offset)


def in_flight_list_out(group: str, page: InFlightPage) -> InFlightListResponse:
    following = page.next_after
    return InFlightListResponse(
        group=group,
        messages=[
            InFlightOut(
                topic=item.topic,
                queue_id=item.queue_id,
                offset=item.offset,
                delivery_attempt=item.attempt,
                holder=item.holder or None,
                invisible_until=item.returns_at_ms,
                due=item.ready,
            )
            for item in page.items
        ],
        total=page.total,
        next_after=in_flight_cursor(following) if following else None,
    )
