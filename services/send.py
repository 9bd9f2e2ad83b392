"""Send: check producer messages, pick a queue, put them durably, count traffic.

Producers may not write system or group (``%RETRY%``/``%DLQ%``) topics.

Queue choice (ARCHITECTURE §4): an explicit queue id (checked against writeQueueNums), else
the hash of a sharding key (RocketMQ's ``SelectMessageQueueByHash``: Java ``hashCode`` modulo
the queue count), else the hash of the idempotency key (so a retry reaches the same queue),
else round robin per topic. A batch goes to one queue, atomically, with consecutive queue
offsets.

A send with an idempotency key is stored once per key and topic inside the window
(:mod:`services.idempotency`): a repeat with the same payload (its :func:`fingerprint`) gets
the original receipts, marked ``replayed``. A batch has one key: a repeated batch replays
every receipt and never stores any of its messages twice.
"""

from __future__ import annotations

import functools
import ipaddress
import itertools
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from services.appender import PutMessages as PutMessages  # re-exported for the DLQ service
from services.errors import BatchRejectedError, IdempotencyUnavailableError, InvalidPropertyError
from services.idempotency import IdempotencyService, Written
from services.metrics import Metrics
from services.outgoing import OutgoingMessage, check_message, deliver_time_of
from services.send_payload import Fingerprint, fingerprint, plain
from services.send_receipts import SendReceipt as SendReceipt  # re-exported
from services.send_receipts import Sent as Sent  # re-exported
from services.timer.handles import TimerHandle
from services.topics import TopicService
from services.trace.tracer import Tracer
from services.uniq_keys import UniqKeyGenerator
from storage import Appended, Message, PutResult, StoredMessage, UniformMessages
from storage.config_managers import TopicConfig
from storage.delay_levels import SCHEDULE_TOPIC
from storage.record.java_hash import java_string_hash
from storage.record.layout import body_crcs
from storage.record.properties import (
    KEY_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
)
from storage.timer import TIMER_TOPIC
from storage.timer.transform import fire_time

_BODY: Final = attrgetter("body")
_QUEUE_ID: Final = attrgetter("queue_id")


def _delayed_or_timed(message: OutgoingMessage) -> bool:
    return bool(
        message.delay_level
        or message.deliver_at is not None
        or message.deliver_after_ms is not None
    )


_SHARDING_KEY: Final = attrgetter("sharding_key")


@dataclass(frozen=True, slots=True)
class SendLimits:
    """Batch limits (the request-size limit is enforced before the body is read)."""

    max_batch_messages: int = 1000
    max_batch_bytes: int = 4 * 1024 * 1024  # sum of the bodies


def shard_queue(sharding_key: str, queue_count: int) -> int:
    """``SelectMessageQueueByHash``: ``abs(hashCode % n)`` in Java, the same queue for a key
    (a sharding key, or the idempotency key of a send that names neither queue nor key)."""
    return abs(java_string_hash(sharding_key)) % queue_count


class SendService:
    """Turns producer messages into stored messages."""

    def __init__(
        self,
        topics: TopicService,
        put: PutMessages,
        metrics: Metrics,
        limits: SendLimits,
        uniq_keys: UniqKeyGenerator | None = None,
        delay_levels: tuple[int, ...] = (),
        idempotency: IdempotencyService | None = None,
        timer_group: str = "broker-a",
        timer_precision_ms: int = 1000,
        tracer: Tracer | None = None,
    ) -> None:
        self._tracer = tracer or Tracer.off()
        self._delay_levels = delay_levels
        self._timer_group = timer_group
        self._timer_precision_ms = timer_precision_ms
        self._idempotency = idempotency
        self._topics = topics
        self._put = put
        self._metrics = metrics
        self._limits = limits
        self._uniq_keys = uniq_keys or UniqKeyGenerator()
        self._round_robin: dict[str, itertools.count[int]] = {}

    async def send(
        self,
        topic: str,
        messages: Sequence[OutgoingMessage],
        *,
        batch_queue_id: int | None = None,
        batch_sharding_key: str | None = None,
        born_host: tuple[str, int] = ("127.0.0.1", 0),
        idempotency_key: str | None = None,
    ) -> Sent:
        """Store ``messages`` in one queue of ``topic`` (one message, or one atomic batch).

        With ``idempotency_key`` (checked by the caller, see
        :func:`services.idempotency.check_key`) a repeat inside the window answers the
        first send's receipts, ``replayed``, and stores nothing.
        """
        self._check_batch(messages)
        born_timestamp = time.time_ns() // 1_000_000
        alone = plain(messages)  # nothing to check, delay or time per message
        if alone:
            levels: list[int] = [0] * len(messages)
            timers: list[int | None] = []
        else:
            levels, timers = self._checked_extras(messages, born_timestamp)
        config = await self._topics.for_produce(topic)
        queue_id = self._choose_queue(
            config, messages, batch_queue_id, batch_sharding_key, idempotency_key
        )
        host = _record_host(born_host)
        uniq_keys = self._uniq_keys.next_many(len(messages))
        bodies = list(map(_BODY, messages))
        crcs = body_crcs(bodies) if idempotency_key is not None else None
        stored: Sequence[Message]
        if alone:  # = _to_store of bodies alone, as columns
            first = Message(
                topic, bodies[0], queue_id, {PROPERTY_UNIQ_KEY: uniq_keys[0]}, 0, 0,
                born_timestamp, host,
            )  # fmt: skip
            stored = UniformMessages(first, bodies, uniq_keys, crcs) if len(bodies) > 1 else [first]
        else:
            stored = [
                self._to_store(topic, queue_id, message, born_timestamp, host, level, uniq_key, at)
                for message, level, uniq_key, at in zip(
                    messages, levels, uniq_keys, timers, strict=True
                )
            ]
        if idempotency_key is None:
            appended = await self._put(stored)
        else:
            payload = fingerprint(messages, levels, alone=alone, crcs=crcs)
            written = await self._put_once(topic, idempotency_key, payload, stored)
            if written.earlier is not None:
                return self._replayed(topic, written.earlier, written)
            assert isinstance(written.results, Appended)
            appended = written.results
        self._metrics.sent(topic, len(bodies), sum(map(len, bodies)))
        if self._tracer.config_on(config):
            producer = f"{host[0]}:{host[1]}"
            self._tracer.stored(topic, stored, appended, producer, uniq_keys if alone else None)
        if appended.topic == topic:  # stored where sent (no delay, no timer): as columns
            if not alone:  # a message may bring its own UNIQ_KEY
                uniq_keys = [m.properties[PROPERTY_UNIQ_KEY] for m in stored]
            return Sent(topic, appended=appended, uniq_keys=uniq_keys)
        return Sent(
            topic,
            listed=[
                self._receipt(topic, queue_id, message, result, level)
                for message, result, level in zip(stored, appended, levels, strict=True)
            ],
        )

    def _checked_extras(
        self, messages: Sequence[OutgoingMessage], born_timestamp: int
    ) -> tuple[list[int], list[int | None]]:
        """The delay level and delivery time of each message, its tags, keys and properties
        checked; a batch is delayed by none and timed as a whole."""
        for message in messages:
            check_message(message)
        if not any(map(_delayed_or_timed, messages)):  # the usual send: neither
            return [0] * len(messages), [None] * len(messages)
        levels = [self.delay_level_of(m) for m in messages]
        if len(messages) > 1 and any(levels):
            raise BatchRejectedError("a batch cannot be delayed: send delayed messages one by one")
        timers = [deliver_time_of(m, born_timestamp) for m in messages]
        if len(messages) > 1 and any(t is not None for t in timers) and None in timers:
            raise BatchRejectedError(
                "a batch is timed as a whole: give deliver_at or deliver_after_ms to every "
                "message of it, or to none"
            )
        return levels, timers

    async def build(
        self, topic: str, message: OutgoingMessage, born_host: tuple[str, int]
    ) -> Message:
        """One message checked and addressed as :meth:`send` would store it, not stored:
        what a transactional send turns into its half message."""
        check_message(message)
        level = self.delay_level_of(message)
        config = await self._topics.for_produce(topic)
        queue_id = self._choose_queue(config, [message], None, None, None)
        host = _record_host(born_host)
        born_timestamp = time.time_ns() // 1_000_000
        uniq_key = self._uniq_keys.next()
        return self._to_store(topic, queue_id, message, born_timestamp, host, level, uniq_key)

    def _put_once(
        self, topic: str, key: str, payload: Fingerprint, stored: Sequence[Message]
    ) -> Awaitable[Written]:
        """Put ``stored`` once under ``key``; ``payload``: the send's :func:`fingerprint`.
        The put's coroutine is handed back to be awaited, not awaited in one more."""
        idempotency = self._idempotency
        if idempotency is None:
            raise IdempotencyUnavailableError("this broker takes no idempotency keys")
        return idempotency.put_once(topic, key, payload, stored)

    def _replayed(self, topic: str, earlier: list[StoredMessage], written: Written) -> Sent:
        """The answer to a repeated keyed send: the first send's receipts, counted."""
        self._metrics.sends_replayed[topic] += 1
        status = written.results[0].status.value
        return Sent(topic, listed=[self._replayed_receipt(topic, r, status) for r in earlier])

    def _replayed_receipt(self, topic: str, record: StoredMessage, status: str) -> SendReceipt:
        """The receipt the first send with the key answered, rebuilt from its record."""
        uniq_key = record.properties.get(PROPERTY_UNIQ_KEY, "")
        if record.topic == TIMER_TOPIC:
            properties = record.properties
            return self._timer_receipt(
                record,
                properties.get(PROPERTY_REAL_TOPIC, topic),
                int(properties.get(PROPERTY_REAL_QID, "0")),
                properties,
                status,
                replayed=True,
            )
        if record.topic != SCHEDULE_TOPIC:
            return SendReceipt(
                record.msg_id,
                uniq_key,
                topic,
                record.queue_id,
                record.queue_offset,
                record.physical_offset,
                record.store_timestamp,
                status,
                replayed=True,
            )
        properties = record.properties
        level = min(int(properties.get(PROPERTY_DELAY, "1")), len(self._delay_levels))
        return SendReceipt(
            record.msg_id,
            uniq_key,
            properties.get(PROPERTY_REAL_TOPIC, topic),
            int(properties.get(PROPERTY_REAL_QID, "0")),
            -1,
            record.physical_offset,
            record.store_timestamp,
            status,
            level,
            record.store_timestamp + self._delay_levels[level - 1],
            replayed=True,
        )

    def _receipt(
        self, topic: str, queue_id: int, message: Message, result: PutResult, level: int
    ) -> SendReceipt:
        uniq_key = message.properties[PROPERTY_UNIQ_KEY]
        if result.topic == TIMER_TOPIC:
            return self._timer_receipt(
                result, topic, queue_id, message.properties, result.status.value, replayed=False
            )
        if not level:
            return SendReceipt(
                result.msg_id,
                uniq_key,
                topic,
                result.queue_id,
                result.queue_offset,
                result.physical_offset,
                result.store_timestamp,
                result.status.value,
            )
        # Stored in the schedule topic; its queue offset in ``topic`` comes at delivery.
        level = min(level, len(self._delay_levels))
        return SendReceipt(
            result.msg_id,
            uniq_key,
            topic,
            queue_id,
            -1,
            result.physical_offset,
            result.store_timestamp,
            result.status.value,
            level,
            result.store_timestamp + self._delay_levels[level - 1],
        )

    def _timer_receipt(
        self,
        result: PutResult | StoredMessage,
        real_topic: str,
        queue_id: int,
        properties: Mapping[str, str],
        status: str,
        *,
        replayed: bool,
    ) -> SendReceipt:
        """A timer message's receipt: in the timer topic until its time, with a cancel handle."""
        uniq_key = properties.get(PROPERTY_UNIQ_KEY, "")
        deliver_at = int(properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
        out = fire_time(deliver_at, self._timer_precision_ms)
        return SendReceipt(
            result.msg_id,
            uniq_key,
            real_topic,
            queue_id,
            -1,  # its offset in the real topic comes at delivery
            result.physical_offset,
            result.store_timestamp,
            status,
            deliver_at=deliver_at,
            replayed=replayed,
            timer_handle=TimerHandle(real_topic, self._timer_group, out + 1, uniq_key).encode(),
        )

    def delay_level_of(self, message: OutgoingMessage) -> int:
        """The delay level a message asks for (0: none)."""
        levels = self._delay_levels
        if message.delay_level and (
            message.deliver_after_ms is not None or message.deliver_at is not None
        ):
            raise InvalidPropertyError(
                "give a delay_level or a delivery time (deliver_at, deliver_after_ms), not both"
            )
        if message.delay_level < 0 or message.delay_level > len(levels):
            raise InvalidPropertyError(
                f"delay_level must be 0 to {len(levels)}, not {message.delay_level}"
            )
        return message.delay_level

    def _check_batch(self, messages: Sequence[OutgoingMessage]) -> None:
        limits = self._limits
        if not messages:
            raise BatchRejectedError("a batch needs at least one message")
        if len(messages) == 1:
            return  # one message is never too many (its size is the store's to check)
        if len(messages) > limits.max_batch_messages:
            raise BatchRejectedError(
                f"a batch holds at most {limits.max_batch_messages} messages, not {len(messages)}"
            )
        total = sum(map(len, map(_BODY, messages)))
        if total > limits.max_batch_bytes:
            raise BatchRejectedError(
                f"the bodies of a batch add up to at most {limits.max_batch_bytes} bytes, "
                f"not {total}"
            )

    def _choose_queue(
        self,
        config: TopicConfig,
        messages: Sequence[OutgoingMessage],
        batch_queue_id: int | None,
        batch_sharding_key: str | None,
        idempotency_key: str | None,
    ) -> int:
        if len(messages) == 1:  # one set of each, not a walk
            first = messages[0]
            queue_ids = set() if first.queue_id is None else {first.queue_id}
            keys = set() if first.sharding_key is None else {first.sharding_key}
        else:
            queue_ids = set(map(_QUEUE_ID, messages)) - {None}
            keys = set(map(_SHARDING_KEY, messages)) - {None}
        if batch_queue_id is not None:
            queue_ids.add(batch_queue_id)
        if batch_sharding_key is not None:
            keys.add(batch_sharding_key)
        if len(queue_ids) > 1 or len(keys) > 1:
            raise BatchRejectedError(
                "every message of a batch goes to one queue: give one queue_id or sharding_key"
            )
        count = config.write_queue_nums
        if queue_ids:
            queue_id = queue_ids.pop()
            self._topics.check_write_queue(config, queue_id)
            return queue_id
        if keys:
            return shard_queue(keys.pop(), count)
        if idempotency_key is not None:
            return shard_queue(idempotency_key, count)
        return self._next_queue(config)

    def _next_queue(self, config: TopicConfig) -> int:
        """Round robin over the topic's write queues."""
        counter = self._round_robin.get(config.topic_name)
        if counter is None:
            counter = self._round_robin[config.topic_name] = itertools.count()
        return next(counter) % config.write_queue_nums

    def _to_store(
        self,
        topic: str,
        queue_id: int,
        message: OutgoingMessage,
        born_timestamp: int,
        born_host: tuple[str, int],
        delay_level: int,
        uniq_key: str,
        deliver_at: int | None = None,
    ) -> Message:
        properties = dict(message.properties) if message.properties else {}
        if delay_level:
            properties[PROPERTY_DELAY] = str(delay_level)
        if deliver_at is not None:
            properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver_at)
        if message.tags:
            properties[PROPERTY_TAGS] = message.tags
        if message.keys:
            properties[PROPERTY_KEYS] = KEY_SEPARATOR.join(message.keys)
        if not properties.get(PROPERTY_UNIQ_KEY):
            properties[PROPERTY_UNIQ_KEY] = uniq_key
        # Positional (flag 0, sys_flag 0): built once per message sent, keywords cost more.
        return Message(topic, message.body, queue_id, properties, 0, 0, born_timestamp, born_host)


@functools.lru_cache(maxsize=4096)
def _record_host(born_host: tuple[str, int]) -> tuple[str, int]:
    try:
        ipaddress.ip_address(born_host[0])
    except ValueError:  # a name: a record holds an IP address
        return ("127.0.0.1", born_host[1])
    return born_host
