"""Consumer send-back: a failed message returns later through ``%RETRY%<group>``, and after
too many attempts lands in ``%DLQ%<group>`` (RocketMQ's ``consumerSendMsgBack``, reference §9).

Rules, in order:

1. The group is auto-created. ``retry_queue_nums <= 0`` drops the message.
2. The retry topic ``%RETRY%<group>`` (``retry_queue_nums`` queues, perm 6) is created on
   demand; the message goes to a random one of its queues.
3. ``RETRY_TOPIC`` is set to the original topic once, so it survives many retries.
4. The limit is the request's ``max_reconsume_times`` or the group's ``retry_max_times`` (16).
5. ``reconsume_times >= limit`` or ``delay_level < 0`` → the DLQ ``%DLQ%<group>`` (one queue,
   perm 6), no delay.
6. Else ``delay_level == 0`` means ``3 + reconsume_times`` (10 s, 30 s, 1 m, …), clamped to
   the table; the message goes through the schedule topic and comes back after the delay.
7. The new message has ``reconsume_times + 1`` and ``ORIGIN_MESSAGE_ID`` (the first one's
   msgId, kept across retries); ``UNIQ_KEY`` is unchanged.

The copy is a re-put keyed by the record it copies (:meth:`IdempotencyService.reput`): a
send-back repeated inside the window -- the consumer retrying after a lost answer, or after
the broker crashed between the write and the answer -- finds the first copy and answers it.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Final

from services.errors import InvalidRequestError, MessageNotFoundError
from services.idempotency import RePut
from services.trace.tracer import Tracer
from storage import Message, MessageStore, PutResult, StoredMessage
from storage.config_managers import SubscriptionGroupConfig, TopicConfig
from storage.delay_levels import SCHEDULE_TOPIC
from storage.record.layout import TRANSACTION_TYPE_MASK
from storage.record.properties import (
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QID,
    PROPERTY_RETRY_TOPIC,
)
from storage.topic_names import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    dlq_topic,
    retry_topic,
)

DLQ_NUMS_PER_GROUP: Final = 1
PERM_READ_WRITE: Final = 6

EnsureTopic = Callable[[TopicConfig], Awaitable[None]]
GroupLookup = Callable[[str], Awaitable[SubscriptionGroupConfig]]


def original_topic(message: StoredMessage) -> str:
    """The topic a (possibly retried or dead-lettered) message was first sent to."""
    return message.properties.get(PROPERTY_RETRY_TOPIC) or message.topic


class Destination(Enum):
    RETRY = "RETRY"
    DLQ = "DLQ"
    DROPPED = "DROPPED"  # the group has no retry queues


@dataclass(frozen=True, slots=True)
class SendBackResult:
    """Where a sent-back message went and when it comes back."""

    destination: Destination
    topic: str
    queue_id: int
    msg_id: str
    origin_msg_id: str
    reconsume_times: int
    delay_level: int
    deliver_at_ms: int  # when it is pulled again; the store time for the DLQ


@dataclass(frozen=True, slots=True)
class SendBackRequest:
    """What a consumer says about a message it failed to process."""

    group: str
    msg_id: str | None = None
    commit_log_offset: int | None = None
    delay_level: int = 0  # 0: automatic, < 0: straight to the DLQ
    max_reconsume_times: int | None = None


class SendBackService:
    """Applies the send-back rules and re-puts the message."""

    def __init__(
        self,
        store: MessageStore,
        group_config: GroupLookup,
        ensure_topic: EnsureTopic,
        reput: RePut,
        rng: random.Random | None = None,
        *,
        tracer: Tracer | None = None,
    ) -> None:
        self._tracer = tracer or Tracer.off()
        self._store = store
        self._group_config = group_config
        self._ensure_topic = ensure_topic
        self._reput = reput
        self._rng = rng or random.Random()

    async def send_back(self, request: SendBackRequest) -> SendBackResult:
        group = await self._group_config(request.group)
        original = self.find(request.msg_id, request.commit_log_offset)
        origin_id = original.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or original.msg_id
        if group.retry_queue_nums <= 0:
            return SendBackResult(
                Destination.DROPPED, "", -1, "", origin_id, original.reconsume_times, 0, 0
            )
        limit = request.max_reconsume_times
        if limit is None or limit < 0:
            limit = group.retry_max_times
        to_dlq = original.reconsume_times >= limit or request.delay_level < 0
        if to_dlq:
            topic, queue_count, delay_level = dlq_topic(group.group_name), DLQ_NUMS_PER_GROUP, 0
        else:
            topic, queue_count = retry_topic(group.group_name), group.retry_queue_nums
            delay_level = request.delay_level or 3 + original.reconsume_times
            delay_level = min(delay_level, len(self._store.delay_levels))
        await self._ensure_topic(
            TopicConfig(
                topic,
                read_queue_nums=queue_count,
                write_queue_nums=queue_count,
                perm=PERM_READ_WRITE,
            )
        )
        queue_id = self._rng.randrange(queue_count)
        message = retry_message(original, topic, queue_id, origin_id, limit, delay_level)
        written = await self._reput(message, original)
        [result] = written.results
        if written.earlier is not None:  # a repeat: where the first copy went
            queue_id, delay_level = _placement(written.earlier[0])
        deliver_at = result.store_timestamp
        if delay_level:
            deliver_at += self._store.delay_levels[delay_level - 1]
        if written.earlier is None and self._tracer.topic_on(original.topic):
            self._trace(group.group_name, original, result, to_dlq, deliver_at)
        return SendBackResult(
            Destination.DLQ if to_dlq else Destination.RETRY,
            topic,
            queue_id,
            result.msg_id,
            origin_id,
            message.reconsume_times,
            delay_level,
            deliver_at,
        )

    def _trace(
        self,
        group: str,
        original: StoredMessage,
        result: PutResult,
        to_dlq: bool,
        deliver_at: int,
    ) -> None:
        attempt = original.reconsume_times + 1
        if to_dlq:
            detail: dict[str, object] = {"dlq_topic": result.topic}
        else:
            delay_ms = deliver_at - result.store_timestamp
            detail = {"retry_topic": result.topic, "delay_ms": delay_ms}
        kind = "dead_lettered" if to_dlq else "sent_back"
        self._tracer.moved(kind, group, original, result, detail, attempt)

    def find(
        self, msg_id: str | None = None, commit_log_offset: int | None = None
    ) -> StoredMessage:
        """The message a send-back names, by offsetMsgId or by CommitLog offset.

        MessageNotFoundError when there is none (or its file has expired).
        """
        if msg_id is not None:
            found = self._store.look_message_by_id(msg_id)
            name = f"message {msg_id}"
        elif commit_log_offset is not None:
            found = self._store.look_message_by_offset(commit_log_offset)
            name = f"message at commit log offset {commit_log_offset}"
        else:
            raise InvalidRequestError("name the message: give msg_id or commit_log_offset")
        if found is None:
            raise MessageNotFoundError(f"{name} does not exist (or its file has expired)")
        return found


def _placement(record: StoredMessage) -> tuple[int, int]:
    """(queue id, delay level) of a stored copy; a delayed one waits in the schedule topic."""
    if record.topic != SCHEDULE_TOPIC:
        return record.queue_id, 0
    properties = record.properties
    return int(properties.get(PROPERTY_REAL_QID, "0")), int(properties.get(PROPERTY_DELAY, "0"))


def retry_message(
    original: StoredMessage,
    topic: str,
    queue_id: int,
    origin_id: str,
    limit: int,
    delay_level: int = 0,
) -> Message:
    """``original`` again for ``topic`` (a retry or DLQ topic): reconsume times + 1, its origin
    id and first topic kept, no transaction flag, delayed by ``delay_level`` when given."""
    properties = dict(original.properties)
    properties.setdefault(PROPERTY_RETRY_TOPIC, original.topic)
    properties[PROPERTY_ORIGIN_MESSAGE_ID] = origin_id
    properties[PROPERTY_MAX_RECONSUME_TIMES] = str(limit)
    properties.pop(PROPERTY_DELAY, None)
    if delay_level:
        properties[PROPERTY_DELAY] = str(delay_level)
    return Message(
        topic=topic,
        body=original.body,
        queue_id=queue_id,
        properties=properties,
        flag=original.flag,
        sys_flag=original.sys_flag & ~TRANSACTION_TYPE_MASK,
        born_timestamp=original.born_timestamp,
        born_host=original.born_host,
        reconsume_times=original.reconsume_times + 1,
    )


__all__ = [
    "DLQ_GROUP_TOPIC_PREFIX",
    "DLQ_NUMS_PER_GROUP",
    "PERM_READ_WRITE",
    "RETRY_GROUP_TOPIC_PREFIX",
    "Destination",
    "SendBackRequest",
    "SendBackResult",
    "SendBackService",
    "dlq_topic",
    "original_topic",
    "retry_message",
    "retry_topic",
]
