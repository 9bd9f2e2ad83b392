"""Request and response bodies of the HTTP API (pydantic), and converters from domain values.

Request models are strict (``false`` is not an integer, ``"1"`` is not a number) and forbid
unknown fields, so a typo is a 422 rather than a silently ignored option. The hot paths (send
and pull) build plain dicts with the ``*_out`` functions below and render them with orjson; the
response models document exactly those shapes.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Mapping
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from app.settings import MAX_PULL_MESSAGES, MAX_REQUEST_BYTES, MAX_WAIT_MS
from services import (
    SYSTEM_TOPICS,
    GetMessageStatus,
    GroupPull,
    QueueLag,
    QueuePull,
    QueueStats,
    SendReceipt,
    StoredMessage,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicLag,
    encode_msg_id,
)

TOPIC_PATTERN = r"^[%|a-zA-Z0-9_-]+$"
TOPIC_MAX_LENGTH = 127
GROUP_MAX_LENGTH = 120
MAX_QUEUES = 1024
MAX_BATCH_MESSAGES = 1000
MAX_PROPERTIES = 64
MAX_KEYS = 64
MAX_DELAY_LEVEL = 64  # the server's delay table decides; 18 levels by default
INT64_MAX = 2**63 - 1

PullStatus = Literal[
    "FOUND",
    "NO_MATCHED_MESSAGE",
    "MESSAGE_WAS_REMOVING",
    "OFFSET_FOUND_NULL",
    "OFFSET_OVERFLOW_BADLY",
    "OFFSET_OVERFLOW_ONE",
    "OFFSET_TOO_SMALL",
    "NO_MATCHED_LOGIC_QUEUE",
    "NO_MESSAGE_IN_QUEUE",
]
assert set(PullStatus.__args__) == {s.value for s in GetMessageStatus}  # type: ignore[attr-defined]

TopicName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=TOPIC_MAX_LENGTH, pattern=TOPIC_PATTERN),
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=255)]
PropertyValue = Annotated[str, StringConstraints(min_length=1, max_length=16_384)]


class RequestBody(BaseModel):
    """Base of request bodies: strict types, unknown fields rejected."""

    model_config = ConfigDict(strict=True, extra="forbid")


# ==================================================================== send


class SendMessage(RequestBody):
    """One message to send."""

    body: str = Field(
        default="",
        max_length=MAX_REQUEST_BYTES,
        description="The message body: text, or base64 when body_encoding is base64.",
    )
    body_encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="How `body` is written: UTF-8 text, or base64 of binary data."
    )
    tags: ShortText | None = Field(
        default=None, description="One tag; consumers filter on it (`A||B`). May not contain `||`."
    )
    keys: list[ShortText] = Field(
        default_factory=list,
        max_length=MAX_KEYS,
        description="Business keys (no spaces), stored in the KEYS property.",
    )
    properties: dict[ShortText, PropertyValue] = Field(
        default_factory=dict,
        max_length=MAX_PROPERTIES,
        description=(
            "User properties. Names the broker uses (TAGS, KEYS, DELAY, REAL_TOPIC, ...) are "
            "refused; UNIQ_KEY may be given, else the broker sets one."
        ),
    )
    queue_id: int | None = Field(
        default=None, ge=0, lt=MAX_QUEUES, description="Send to this queue (below writeQueueNums)."
    )
    sharding_key: ShortText | None = Field(
        default=None, description="Messages with the same key go to the same queue."
    )
    delay_level: int = Field(
        default=0,
        ge=0,
        le=MAX_DELAY_LEVEL,
        description=(
            "Deliver after this delay level: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m "
            "30m 1h 2h by default (levels 1 to 18; the server's table may differ)."
        ),
    )
    deliver_after_ms: int | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description=(
            "Beyond RocketMQ: deliver after at least this many milliseconds, rounded UP to "
            "the next delay level (e.g. 7000 -> level 3, 10 s). Longer than the longest "
            "level is refused. Not with delay_level, and not in a batch of more than one."
        ),
    )


class SendBatch(RequestBody):
    """Several messages stored atomically in one queue with consecutive offsets."""

    messages: list[SendMessage] = Field(min_length=1, max_length=MAX_BATCH_MESSAGES)
    queue_id: int | None = Field(
        default=None, ge=0, lt=MAX_QUEUES, description="Queue of the batch."
    )
    sharding_key: ShortText | None = Field(default=None, description="Sharding key of the batch.")


class SendReceiptOut(BaseModel):
    msg_id: str = Field(description="offsetMsgId: GET /v1/messages/{msg_id} finds it.")
    uniq_key: str = Field(description="Client-style id (UNIQ_KEY property).")
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_timestamp: int = Field(description="Milliseconds since the epoch.")
    status: Literal["PUT_OK", "FLUSH_DISK_TIMEOUT"] = Field(
        default="PUT_OK",
        description=(
            "FLUSH_DISK_TIMEOUT (SYNC_FLUSH only): stored, but not confirmed on disk in time; "
            "it becomes visible once flushed."
        ),
    )
    delay_level: int = Field(default=0, description="The delay level used; 0 if not delayed.")
    deliver_at: int | None = Field(
        default=None,
        description=(
            "Delayed messages: when they become visible (ms since the epoch). Their "
            "queue_offset is -1 until then."
        ),
    )


class SendResponse(BaseModel):
    topic: str
    messages: list[SendReceiptOut]


def send_response_out(topic: str, receipts: list[SendReceipt]) -> dict[str, object]:
    return {
        "topic": topic,
        "messages": [
            {
                "msg_id": r.msg_id,
                "uniq_key": r.uniq_key,
                "queue_id": r.queue_id,
                "queue_offset": r.queue_offset,
                "commit_log_offset": r.commit_log_offset,
                "store_timestamp": r.store_timestamp,
                "status": r.status,
                "delay_level": r.delay_level,
                "deliver_at": r.deliver_at,
            }
            for r in receipts
        ],
    }


class RawSendQuery(BaseModel):
    """Query parameters of a raw-body send (they describe the one message)."""

    tags: ShortText | None = Field(default=None, description="Raw body only: its tag.")
    keys: list[ShortText] | None = Field(
        default=None, max_length=MAX_KEYS, description="Raw body only: its keys."
    )
    properties: list[str] | None = Field(
        default=None,
        alias="property",
        max_length=MAX_PROPERTIES,
        description="Raw body only: a property as `name=value`; repeat for more.",
    )
    queue_id: int | None = Field(
        default=None, ge=0, lt=MAX_QUEUES, description="Raw body only: the queue."
    )
    sharding_key: ShortText | None = Field(
        default=None, description="Raw body only: the sharding key."
    )
    delay_level: int | None = Field(
        default=None, ge=0, le=MAX_DELAY_LEVEL, description="Raw body only: the delay level."
    )
    deliver_after_ms: int | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="Raw body only: deliver after this many ms (rounded up to a level).",
    )

    def given(self) -> bool:
        return any(
            v is not None
            for v in (
                self.tags,
                self.keys,
                self.properties,
                self.queue_id,
                self.sharding_key,
                self.delay_level,
                self.deliver_after_ms,
            )
        )


# ==================================================================== pull


class PullLimits(BaseModel):
    """Query parameters every pull shares."""

    max_messages: int = Field(
        default=32, ge=1, le=MAX_PULL_MESSAGES, description="Most messages to return."
    )
    max_bytes: int | None = Field(
        default=None,
        ge=1,
        le=64 * 1024 * 1024,
        description="Byte budget (the first message is returned even when larger); the "
        "store also caps a pull at 256 KiB of messages in memory.",
    )
    tags: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="Tag filter: `*` or `TagA||TagB`.",
    )
    wait_ms: int = Field(
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

    offset: int | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="Queue offset to read from; default: the group's position when `group` "
        "is given, else the queue's min offset.",
    )
    group: str | None = Field(
        default=None,
        min_length=1,
        max_length=GROUP_MAX_LENGTH,
        description="Consumer group (for its position).",
    )
    commit_offset: int | None = Field(
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


class MessageOut(BaseModel):
    """A stored message."""

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
    queue_topic: str | None = Field(
        default=None,
        description=(
            "Group pulls: set when the message was read from the group's retry topic "
            "(%RETRY%<group>); commit its queue_offset to that topic's queue. `topic` is then "
            "the topic it was first sent to."
        ),
    )


class MessageListResponse(BaseModel):
    topic: str
    messages: list[MessageOut]


class KeyQuery(BaseModel):
    """Query parameters of a lookup by key."""

    key: ShortText = Field(description="A business key (KEYS) or a UNIQ_KEY.")
    begin_timestamp: int = Field(
        default=0, ge=0, le=INT64_MAX, description="Stored at or after (ms since the epoch)."
    )
    end_timestamp: int | None = Field(
        default=None, ge=0, le=INT64_MAX, description="Stored at or before (default: now)."
    )
    max_messages: int = Field(
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


class PullResponse(BaseModel):
    topic: str
    queue_id: int
    status: PullStatus = Field(description="RocketMQ's GetMessageStatus name.")
    offset: int = Field(description="Where this pull started.")
    next_offset: int = Field(description="Where the next pull should start.")
    min_offset: int
    max_offset: int
    messages: list[MessageOut]


class QueueProgressOut(BaseModel):
    queue_id: int
    offset: int = Field(description="The group's position when the pull started.")
    next_offset: int = Field(description="Commit this to acknowledge what was returned.")
    max_offset: int
    topic: str = Field(description="The queue's topic: the pulled topic or %RETRY%<group>.")


class GroupPullResponse(BaseModel):
    group: str
    topic: str
    messages: list[MessageOut]
    queues: list[QueueProgressOut]


@functools.lru_cache(maxsize=64)
def _msg_id_prefix(store_host: tuple[str, int]) -> str:
    """Hex of the store address and port: a msgId is this plus the 16-hex-digit offset."""
    return encode_msg_id(store_host[0], store_host[1], 0)[:-16]


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
        "msg_id": f"{_msg_id_prefix(message.store_host)}{offset:016X}",
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


def pull_out(pulled: QueuePull, encoding: str) -> dict[str, object]:
    return {
        "topic": pulled.topic,
        "queue_id": pulled.queue_id,
        "status": pulled.status.value,
        "offset": pulled.offset,
        "next_offset": pulled.next_offset,
        "min_offset": pulled.min_offset,
        "max_offset": pulled.max_offset,
        "messages": [message_out(m, encoding) for m in pulled.messages],
    }


def group_pull_out(pulled: GroupPull, encoding: str) -> dict[str, object]:
    return {
        "group": pulled.group,
        "topic": pulled.topic,
        "messages": [
            _with_queue_topic(message_out(m, encoding), queue_topic, m.topic)
            for m, queue_topic in zip(pulled.messages, pulled.queue_topics, strict=True)
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


def _with_queue_topic(out: dict[str, object], queue_topic: str, topic: str) -> dict[str, object]:
    if queue_topic != topic:
        out["queue_topic"] = queue_topic
    return out


# ==================================================================== offsets


class OffsetCommitIn(RequestBody):
    offset: int = Field(ge=0, description="The next offset the group will consume.")


class OffsetCommitItem(RequestBody):
    topic: TopicName
    queue_id: int = Field(ge=0, lt=MAX_QUEUES)
    offset: int = Field(ge=0, description="The next offset the group will consume.")


class OffsetBatchIn(RequestBody):
    offsets: list[OffsetCommitItem] = Field(min_length=1, max_length=MAX_BATCH_MESSAGES)


class CommittedOffsetOut(BaseModel):
    topic: str
    queue_id: int
    offset: int


class OffsetCommitResponse(BaseModel):
    group: str
    offsets: list[CommittedOffsetOut]


class QueueLagOut(BaseModel):
    queue_id: int
    committed_offset: int
    min_offset: int
    max_offset: int
    lag: int = Field(description="Messages between the committed offset and the max offset.")
    lag_seconds: float | None = Field(
        description="Age of the oldest message not consumed yet: now minus its store time "
        "(0 when nothing waits; null when its store time cannot be read)."
    )
    last_commit_timestamp: int
    in_flight: int = Field(
        default=0,
        description="POP groups: received and not acked yet (counted in `lag` too: a POP "
        "group's committed offset is its lowest un-acked offset).",
    )


class TopicLagOut(BaseModel):
    topic: str
    total_lag: int
    queues: list[QueueLagOut]


class GroupOffsetsResponse(BaseModel):
    group: str
    total_lag: int
    topics: list[TopicLagOut]


def queue_lag_out(lag: QueueLag, in_flight: int = 0) -> QueueLagOut:
    return QueueLagOut(
        queue_id=lag.queue_id,
        committed_offset=lag.committed_offset,
        min_offset=lag.min_offset,
        max_offset=lag.max_offset,
        lag=lag.lag,
        lag_seconds=lag.lag_seconds,
        last_commit_timestamp=lag.last_commit_timestamp,
        in_flight=in_flight,
    )


def group_offsets_out(
    group: str, report: list[TopicLag], in_flight: Mapping[tuple[str, int], int] | None = None
) -> GroupOffsetsResponse:
    """``in_flight``: POP messages in flight by (topic, queue id)."""
    flying = in_flight or {}
    topics = [
        TopicLagOut(
            topic=t.topic,
            total_lag=t.total_lag,
            queues=[queue_lag_out(q, flying.get((t.topic, q.queue_id), 0)) for q in t.queues],
        )
        for t in report
    ]
    return GroupOffsetsResponse(
        group=group, total_lag=sum(t.total_lag for t in topics), topics=topics
    )


# ==================================================================== topics


class TopicIn(RequestBody):
    read_queue_nums: int = Field(
        default=8, ge=1, le=MAX_QUEUES, description="Queues consumers read."
    )
    write_queue_nums: int = Field(
        default=8, ge=1, le=MAX_QUEUES, description="Queues producers write."
    )
    perm: int = Field(
        default=6, ge=0, le=7, description="PermName bits: 4 read, 2 write, 1 inherit."
    )
    order: bool = False


class QueueStatsOut(BaseModel):
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int = Field(description="Ms of the newest message; 0 when empty.")


class TopicOut(BaseModel):
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    readable: bool
    writeable: bool
    order: bool
    system: bool = Field(description="Written by the broker only.")


class TopicDetailOut(TopicOut):
    queues: list[QueueStatsOut]


class TopicListResponse(BaseModel):
    topics: list[TopicOut]


def topic_out(config: TopicConfig) -> TopicOut:
    return TopicOut(
        topic=config.topic_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        readable=config.is_readable,
        writeable=config.is_writeable,
        order=config.order,
        system=config.topic_name in SYSTEM_TOPICS,
    )


def topic_detail_out(config: TopicConfig, queues: list[QueueStats]) -> TopicDetailOut:
    return TopicDetailOut(
        **topic_out(config).model_dump(),
        queues=[
            QueueStatsOut(
                queue_id=q.queue_id,
                min_offset=q.min_offset,
                max_offset=q.max_offset,
                last_store_timestamp=q.last_store_timestamp,
            )
            for q in queues
        ],
    )


# ==================================================================== groups


class GroupIn(RequestBody):
    consume_enable: bool = Field(default=True, description="Whether the group may pull.")
    consume_from: Literal["earliest", "latest", "timestamp"] = Field(
        default="earliest",
        description="Where the group starts on a queue it never committed.",
    )
    consume_from_timestamp: int | None = Field(
        default=None,
        ge=0,
        description="Ms since the epoch; required when consume_from is timestamp.",
    )
    retry_queue_nums: int = Field(default=1, ge=0, le=MAX_QUEUES)
    retry_max_times: int = Field(
        default=16,
        ge=-1,
        le=10_000,
        description="-1 means the default, 16. Also the POP max_reconsume_times.",
    )
    consume_mode: Literal["offsets", "pop"] | None = Field(
        default=None,
        description=(
            "offsets: pull + commit; pop: receive + ack. Unset: chosen by the first receive "
            "(pop) — mixing the two answers 409."
        ),
    )
    fifo: bool = Field(
        default=False,
        description="POP only: deliver each queue in order, one holder at a time.",
    )

    @model_validator(mode="after")
    def _timestamp_with_timestamp(self) -> Self:
        if (self.consume_from == "timestamp") != (self.consume_from_timestamp is not None):
            raise ValueError(
                "consume_from_timestamp is required with consume_from=timestamp, and only then"
            )
        return self


class GroupOut(BaseModel):
    group: str
    consume_enable: bool
    consume_from: Literal["earliest", "latest", "timestamp"]
    consume_from_timestamp: int | None
    retry_queue_nums: int
    retry_max_times: int
    consume_mode: Literal["offsets", "pop"] | None = None
    fifo: bool = False


class GroupListResponse(BaseModel):
    groups: list[GroupOut]


def group_out(config: SubscriptionGroupConfig) -> GroupOut:
    timestamp = config.consume_from_timestamp
    consume_from: Literal["earliest", "latest", "timestamp"] = "earliest"
    if timestamp is not None:
        consume_from = "timestamp"
    elif config.consume_from == "latest":
        consume_from = "latest"
    return GroupOut(
        group=config.group_name,
        consume_enable=config.consume_enable,
        consume_from=consume_from,
        consume_from_timestamp=timestamp,
        retry_queue_nums=config.retry_queue_nums,
        retry_max_times=config.retry_max_times,
        consume_mode=_consume_mode(config.consume_mode),
        fifo=config.fifo,
    )


def _consume_mode(mode: str) -> Literal["offsets", "pop"] | None:
    if mode == "offsets":
        return "offsets"
    return "pop" if mode == "pop" else None


# ==================================================================== health and errors


class HealthResponse(BaseModel):
    status: Literal["ok"]


class ReadyResponse(BaseModel):
    status: Literal["ready"]
    state: str
    parked_pulls: int


class FieldError(BaseModel):
    loc: list[str | int] = Field(description="Where: body, query, path or header, then names.")
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details, plus a stable ``code`` and the request id."""

    type: str = Field(description="A URI naming the problem type (urn:spoolmq:problem:<code>).")
    title: str
    status: int
    detail: str
    code: str = Field(description="Stable, machine-readable error code, e.g. TOPIC_NOT_FOUND.")
    instance: str = Field(description="The request path.")
    request_id: str
    errors: list[FieldError] | None = Field(default=None, description="Field errors of a 422.")
