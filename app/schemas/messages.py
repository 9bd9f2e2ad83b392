"""Messages: send (JSON or raw body), pull from one queue or for a group, look up by key.

The busiest routes (send and pull) build plain dicts with the ``*_out`` functions below and render
them with orjson; the response models document exactly those shapes.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import (
    FILTER_RULES,
    INT64_MAX,
    FilterType,
    GroupName,
    ParamInt,
    PullStatus,
    ResponseBody,
    ShortText,
    SqlFilter,
    TimestampMs,
)
from app.settings import MAX_PULL_MESSAGES, MAX_WAIT_MS
from services import GroupPull, QueuePull
from storage.record.message import MessageView, StoredMessage

# ==================================================================== pull


MAX_BYTES_PARAMETER: Final = 64 * 1024 * 1024
"""The largest byte budget a pull may ask for."""


class MessageFilterQuery(BaseModel):
    """What a read takes of a queue: the tag and SQL92 filters (RocketMQ's subscription)."""

    tags: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="Tag filter: `*` or `TagA||TagB`.",
    )
    filter: SqlFilter | None = Field(default=None, description=FILTER_RULES)
    filter_type: FilterType = Field(
        default="sql92", description="The language of `filter`: `sql92` (RocketMQ's)."
    )


class PullLimits(MessageFilterQuery):
    """Query parameters every pull shares."""

    max_messages: ParamInt = Field(
        default=32,
        ge=1,
        le=MAX_PULL_MESSAGES,
        description="Most messages to return. As in RocketMQ's broker, one read of a queue "
        "returns at most 32 messages (`maxTransferCountOnMessageInMemory`; 8 once they are "
        "no longer in memory) and at most 256 KiB (64 KiB from disk); a group pull applies "
        "that to each queue it reads. Pull again from `next_offset` for more.",
    )
    max_bytes: ParamInt | None = Field(
        default=None,
        ge=1,
        le=MAX_BYTES_PARAMETER,
        description="Byte budget (the first message is returned even when larger); the "
        "store also caps a pull at 256 KiB of messages in memory.",
    )
    wait_ms: ParamInt = Field(
        default=0,
        ge=0,
        le=MAX_WAIT_MS,
        description=f"Long-poll: wait up to this many ms (at most {MAX_WAIT_MS}) when there "
        "is nothing to return. An empty long-poll is a 200 with no messages.",
    )
    body_encoding: Literal["auto", "base64"] = Field(
        default="auto",
        description="`auto`: bodies that are valid UTF-8 as text, others as base64; "
        "`base64`: every body as base64.",
    )


class PullQuery(PullLimits):
    """Query parameters of a pull from one queue."""

    offset: ParamInt | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="Queue offset to read from; default: the group's position when `group` "
        "is given, else the queue's min offset.",
    )
    group: GroupName | None = Field(
        default=None, description="Consumer group (for its position and `commit_offset`)."
    )
    commit_offset: ParamInt | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="Commit this offset for `group` first.",
    )


class GroupPullQuery(PullLimits):
    """Query parameters of a group pull."""

    auto_commit: bool = Field(
        default=False, description="Commit the returned positions at once (at-most-once)."
    )


# ==================================================================== a range of records


RECORDS_MEDIA_TYPE: Final = "application/vnd.spoolmq.commitlog-records"
"""A range read's answer: CommitLog records as the store keeps them, one after another."""
DEFAULT_RECORDS_BYTES: Final = 4 * 1024 * 1024
"""A range read's byte budget unless it names one."""
MAX_RECORDS_BYTES: Final = 16 * 1024 * 1024
"""The largest byte budget a range read may ask for."""
RECORDS_STATUS_HEADER: Final = "spoolmq-status"
RECORDS_NEXT_OFFSET_HEADER: Final = "spoolmq-next-offset"
RECORDS_MIN_OFFSET_HEADER: Final = "spoolmq-min-offset"
RECORDS_MAX_OFFSET_HEADER: Final = "spoolmq-max-offset"
RECORDS_COUNT_HEADER: Final = "spoolmq-record-count"
RECORDS_HEADERS: Final = (
    RECORDS_STATUS_HEADER,
    RECORDS_NEXT_OFFSET_HEADER,
    RECORDS_MIN_OFFSET_HEADER,
    RECORDS_MAX_OFFSET_HEADER,
    RECORDS_COUNT_HEADER,
)
"""The headers of a range read's answer (a proxy passes them on)."""
RECORDS_LAYOUT: Final = (
    "The body is the queue's CommitLog records from `offset` on, as the broker stores them and "
    "one after another: RocketMQ's record layout (TOTALSIZE, MAGICCODE, BODYCRC, QUEUEID, FLAG, "
    "QUEUEOFFSET, PHYSICALOFFSET, SYSFLAG, BORNTIMESTAMP, BORNHOST, STORETIMESTAMP, STOREHOST, "
    "RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET, BODY, TOPIC, PROPERTIES; big-endian; format v1 "
    "or v2, IPv4 or IPv6 hosts as SYSFLAG says), each starting with its TOTALSIZE. QUEUEID is "
    "the broker's own queue id. Properties may hold the broker's bookkeeping, which readers do "
    "not show. An empty body with a status other than FOUND says why nothing came."
)


class RecordsQuery(MessageFilterQuery):
    """Query parameters of a range read of one queue."""

    offset: ParamInt | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="Queue offset to read from; default: the queue's min offset.",
    )
    end_offset: ParamInt | None = Field(
        default=None,
        ge=1,
        le=INT64_MAX,
        description="Read no offset at or past this one (a range's end); default: the queue's "
        "max offset.",
    )
    max_bytes: ParamInt = Field(
        default=DEFAULT_RECORDS_BYTES,
        ge=1,
        le=MAX_RECORDS_BYTES,
        description="Byte budget of the records (the first one is returned even when "
        f"larger); at most {MAX_RECORDS_BYTES}.",
    )
    group: GroupName | None = Field(
        default=None,
        description="Consumer group whose stored SQL92 filter for the topic applies when "
        "`filter` is not given, as in a pull by the group; its position is neither read nor "
        "moved.",
    )
    wait_ms: ParamInt = Field(
        default=0,
        ge=0,
        le=MAX_WAIT_MS,
        description=f"Long-poll: wait up to this many ms (at most {MAX_WAIT_MS}) where a pull "
        "would (nothing at `offset` yet, or only what the filters skip), never past "
        "`end_offset`. An empty long-poll is a 200 with no records.",
    )


def _records_header(description: str, schema: dict[str, object]) -> dict[str, object]:
    return {"description": description, "schema": schema}


RECORDS_RESPONSES: Final[dict[int | str, dict[str, object]]] = {
    200: {
        "description": RECORDS_LAYOUT,
        "content": {RECORDS_MEDIA_TYPE: {"schema": {"type": "string", "format": "binary"}}},
        "headers": {
            RECORDS_STATUS_HEADER: _records_header(
                "RocketMQ's GetMessageStatus name, as a pull answers it.",
                {"type": "string", "enum": list(PullStatus.__args__)},  # type: ignore[attr-defined]
            ),
            RECORDS_NEXT_OFFSET_HEADER: _records_header(
                "Where the next read should start.", {"type": "integer", "minimum": 0}
            ),
            RECORDS_MIN_OFFSET_HEADER: _records_header(
                "The queue's min offset.", {"type": "integer", "minimum": 0}
            ),
            RECORDS_MAX_OFFSET_HEADER: _records_header(
                "The queue's max offset.", {"type": "integer", "minimum": 0}
            ),
            RECORDS_COUNT_HEADER: _records_header(
                "How many records the body holds.", {"type": "integer", "minimum": 0}
            ),
        },
    }
}
"""The documented 200 answer of a range read."""


def records_headers(
    status: str, next_offset: int, min_offset: int, max_offset: int, count: int
) -> dict[str, str]:
    """The headers of a range read's answer."""
    return {
        RECORDS_STATUS_HEADER: status,
        RECORDS_NEXT_OFFSET_HEADER: str(next_offset),
        RECORDS_MIN_OFFSET_HEADER: str(min_offset),
        RECORDS_MAX_OFFSET_HEADER: str(max_offset),
        RECORDS_COUNT_HEADER: str(count),
    }


class MessageFields(ResponseBody):
    """The fields of a stored message, always sent."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    body: str
    body_encoding: Literal["utf-8", "base64"]
    tags: str | None
    keys: list[str]
    properties: dict[str, str] = Field(description="Every property except TAGS and KEYS.")
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int


class MessageOut(MessageFields):
    """A stored message; ``queue_topic`` only on group pulls from the retry topic."""

    # queue_topic is left out when it would be null, so it is the one optional field.
    model_config = ConfigDict(json_schema_serialization_defaults_required=False)

    queue_topic: str | None = Field(
        default=None,
        description=(
            "Sent only by group pulls, and only for a message read from the group's retry "
            "topic (%RETRY%<group>): commit its queue_offset to that topic's queue. `topic` "
            "is then the topic it was first sent to."
        ),
    )


class MessageListResponse(ResponseBody):
    topic: str
    messages: list[MessageOut]


class KeyQuery(BaseModel):
    """Query parameters of a lookup by key."""

    key: ShortText = Field(description="A business key (KEYS) or a UNIQ_KEY.")
    begin_timestamp: TimestampMs = Field(
        default=0, description="Stored at or after (epoch ms or ISO 8601)."
    )
    end_timestamp: TimestampMs | None = Field(
        default=None, description="Stored at or before (epoch ms or ISO 8601; default: now)."
    )
    max_messages: ParamInt = Field(
        default=32,
        ge=1,
        le=64,
        description="Most messages to return; their bodies also stay within the server's "
        "pull byte cap (the first message always).",
    )
    body_encoding: Literal["auto", "base64"] = Field(
        default="auto",
        description="`auto`: bodies that are valid UTF-8 as text, others as base64; "
        "`base64`: every body as base64.",
    )


class PullResponse(ResponseBody):
    topic: str
    queue_id: int
    status: PullStatus = Field(description="RocketMQ's GetMessageStatus name.")
    offset: int = Field(description="Where this pull started.")
    next_offset: int = Field(description="Where the next pull should start.")
    min_offset: int
    max_offset: int
    messages: list[MessageOut]


class QueueProgressOut(ResponseBody):
    queue_id: int
    offset: int = Field(description="The group's position when the pull started.")
    next_offset: int = Field(description="Commit this to acknowledge what was returned.")
    max_offset: int
    topic: str = Field(description="The queue's topic: the pulled topic or %RETRY%<group>.")


class GroupPullResponse(ResponseBody):
    group: str
    topic: str
    messages: list[MessageOut]
    queues: list[QueueProgressOut]


def message_out(message: StoredMessage, encoding: str = "auto") -> dict[str, object]:
    """A stored message as JSON; ``auto`` sends bodies that are valid UTF-8 as text."""
    body = message.body
    text: str | None = None
    if encoding == "auto":
        try:
            text = body.decode()
        except UnicodeDecodeError:
            text = None
    body_encoding = "utf-8" if text is not None else "base64"
    if text is None:
        text = base64.b64encode(body).decode("ascii")
    properties = message.properties
    tags = properties.get("TAGS")
    keys = properties.get("KEYS")
    if tags is not None or keys is not None:
        properties = {k: v for k, v in properties.items() if k != "TAGS" and k != "KEYS"}
    offset = message.physical_offset
    return {
        "msg_id": message.msg_id,
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "commit_log_offset": offset,
        "body": text,
        "body_encoding": body_encoding,
        "tags": tags,
        "keys": [k for k in keys.split(" ") if k] if keys else [],
        "properties": properties,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": message.store_timestamp,
        "reconsume_times": message.reconsume_times,
    }


def view_out(message: MessageView, encoding: str = "auto") -> dict[str, object]:
    """:func:`message_out` of a message as a pull reads it: the same JSON, the body as text
    when ``auto`` finds it valid UTF-8, else base64."""
    return views_out([message], encoding)[0]


def views_out(views: list[MessageView], encoding: str = "auto") -> list[dict[str, object]]:
    """:func:`view_out` of each message of a pull, in one comprehension (no call per message):
    the bodies all as text (the common case) in one pass, else each as it turns out."""
    if encoding == "auto":
        try:
            return _rendered(views, bytes.decode, "utf-8")  # cheaper to call than str
        except UnicodeDecodeError:  # a body is not text: each message on its own
            if len(views) > 1:
                return [view_out(view, encoding) for view in views]
    return _rendered(views, _base64_text, "base64")


def _base64_text(body: bytes, _encoding: str) -> str:
    return base64.b64encode(body).decode("ascii")


def _rendered(
    views: list[MessageView], text: Callable[[bytes, str], str], body_encoding: str
) -> list[dict[str, object]]:
    """The JSON of each message, its body as ``text(body, "utf-8")`` makes it."""
    return [
        {
            "msg_id": msg_id,
            "topic": topic,
            "queue_id": queue_id,
            "queue_offset": queue_offset,
            "commit_log_offset": physical_offset,
            "body": text(body, "utf-8"),
            "body_encoding": body_encoding,
            "tags": tags,
            "keys": keys,
            "properties": properties,
            "born_timestamp": born_timestamp,
            "store_timestamp": store_timestamp,
            "reconsume_times": reconsume_times,
        }
        for (
            msg_id,
            topic,
            queue_id,
            queue_offset,
            physical_offset,
            _size,
            body,
            tags,
            keys,
            properties,
            born_timestamp,
            store_timestamp,
            reconsume_times,
        ) in views
    ]


def pull_out(pulled: QueuePull, encoding: str) -> dict[str, object]:
    return {
        "topic": pulled.topic,
        "queue_id": pulled.queue_id,
        "status": pulled.status.value,
        "offset": pulled.offset,
        "next_offset": pulled.next_offset,
        "min_offset": pulled.min_offset,
        "max_offset": pulled.max_offset,
        "messages": views_out(pulled.views, encoding),
    }


def group_pull_out(pulled: GroupPull, encoding: str) -> dict[str, object]:
    return {
        "group": pulled.group,
        "topic": pulled.topic,
        "messages": [
            _with_queue_topic(out, queue_topic)
            for out, queue_topic in zip(
                views_out(pulled.views, encoding), pulled.queue_topics, strict=True
            )
        ],
        "queues": [
            {
                "topic": q.topic or pulled.topic,
                "queue_id": q.queue_id,
                "offset": q.offset,
                "next_offset": q.next_offset,
                "max_offset": q.max_offset,
            }
            for q in pulled.queues
        ],
    }


def _with_queue_topic(out: dict[str, object], queue_topic: str) -> dict[str, object]:
    if queue_topic != out["topic"]:
        out["queue_topic"] = queue_topic
    return out
