"""The hooks the services call where a step of a message's life happens.

Each hook is cheap when the step's topic is not traced: the caller asks first
(:meth:`Tracer.config_on`, :meth:`Tracer.topic_on`) and builds nothing when the answer is no.
A traced step becomes events handed to the :class:`~services.trace.writer.TraceWriter`; work
that needs the store (the messages an offset commit or an ack covers) is handed over as a
function the writer's task runs. A hook never raises into the request that called it.

Delivery events are written when they are proven: a pull delivery when the group's offset
commit covers it (``delivered`` + ``acked``), a POP delivery when it is acked, nacked, its
invisibility changed or it is revived (``delivered`` at its receive time, then the outcome).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any, Final

from services.trace.events import (
    BUCKET_SIZE,
    Consumer,
    EventTexts,
    TraceEvent,
    id_text,
    json_text,
    position_key,
)
from services.trace.recent import RecentPulls, Served
from services.trace.switch import TraceSwitch, original_topic
from services.trace.writer import Making, TraceWriter
from storage import Appended, Message, PutResult, StoredMessage
from storage.config_managers import TopicConfig
from storage.record.fields import VIEW_PROPERTIES, VIEW_TOPIC, MessageView, NamedView
from storage.record.properties import PROPERTY_KEYS as _KEYS
from storage.record.properties import (
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    split_keys,
)
from storage.topic_names import is_group_topic

log = logging.getLogger(__name__)

CURRENT_CONSUMER: ContextVar[Callable[[], Consumer] | None] = ContextVar(
    "trace_consumer", default=None
)
"""Who sent the request being served (set by the HTTP layer), for delivery events: made only
when a step is traced."""

MAX_COMMIT_SPAN: Final = 4096
"""Messages one offset commit traces at most (a commit jumping further traces its last ones)."""
# Positions of NamedView's fields in a MessageView (checked below), besides storage's.
VIEW_QUEUE_ID: Final = 2
VIEW_QUEUE_OFFSET: Final = 3
VIEW_KEYS: Final = 8
VIEW_RECONSUME_TIMES: Final = 12
assert NamedView._fields[VIEW_QUEUE_ID] == "queue_id"
assert NamedView._fields[VIEW_QUEUE_OFFSET] == "queue_offset"
assert NamedView._fields[VIEW_KEYS] == "keys"
assert NamedView._fields[VIEW_RECONSUME_TIMES] == "reconsume_times"
_MAX_REMEMBERED: Final = 100_000
"""POP receivers (and changed CKs) remembered at most."""
_READ_BATCH: Final = 32
_READER: Final = "spoolmq-trace"

ReadMessages = Callable[[str, int, int, int], list[StoredMessage]]
"""Up to ``n`` messages of (topic, queue id) from an offset: the store's read."""

PopDelivery = tuple[int, int, int, str]
"""(queue offset, attempt, receive time in ms, holder) of one POP delivery."""


def current_consumer() -> Consumer | None:
    """The consumer of the request being served, if the HTTP layer named one."""
    make = CURRENT_CONSUMER.get()
    return None if make is None else make()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _msg_id(properties: dict[str, str]) -> str:
    return properties.get(PROPERTY_UNIQ_KEY, "")


def _deliver_at(properties: dict[str, str], store_timestamp: int) -> int:
    """When a timed message is due (a delayed one's time comes with its level: unknown here,
    its store time is given)."""
    return int(properties.get(PROPERTY_TIMER_DELIVER_MS, store_timestamp))


def _user_keys(properties: dict[str, str]) -> tuple[str, ...]:
    return tuple(split_keys(properties.get(_KEYS)))


class Tracer:
    """Turns the steps the services report into trace events (see the module docstring)."""

    def __init__(
        self,
        switch: TraceSwitch,
        writer: TraceWriter | None,
        read: ReadMessages | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.switch = switch
        self.writer = writer
        self._read = read
        self._now = clock
        self.recent = RecentPulls()
        self._receivers: OrderedDict[str, Consumer] = OrderedDict()  # by CK id
        self._announced: OrderedDict[str, None] = OrderedDict()  # CKs whose delivery is traced

    @classmethod
    def off(cls) -> Tracer:
        """A tracer that traces nothing (a broker without a writer, a service under test)."""
        return cls(TraceSwitch.off(), None)

    # ------------------------------------------------------------------ switches

    def config_on(self, config: TopicConfig) -> bool:
        """Whether steps of the topic of ``config`` are traced."""
        return self.writer is not None and self.switch.for_config(config)

    def topic_on(self, topic: str) -> bool:
        """Whether steps in ``topic`` (a retry or DLQ topic: of any traced topic) are traced."""
        return self.writer is not None and self.switch.for_topic(topic)

    def _offer(self, events: Sequence[TraceEvent]) -> None:
        if events and self.writer is not None:
            self.writer.offer(events)

    def _offer_made(self, make: Making, size: int) -> None:
        if self.writer is not None:
            self.writer.offer(make, size)

    def _traced(self, message: StoredMessage | Message) -> bool:
        topic = original_topic(message.topic, message.properties.get(PROPERTY_RETRY_TOPIC))
        return self.switch.for_message(topic, _msg_id(message.properties))

    # ------------------------------------------------------------------ send

    def stored(
        self,
        topic: str,
        messages: Sequence[Message],
        results: Appended,
        producer: str,
        uniq_keys: list[str] | None = None,
    ) -> None:
        """A send stored ``messages`` (in ``topic``, or in the timer or schedule topic until
        their time: ``timer_scheduled``). ``uniq_keys``: their ids when they carry nothing
        else (the common batch): their events are made as text, in the writer's task."""
        if uniq_keys is not None and results.topic == topic and self.switch.sample_rate >= 1:
            queue_id, first, at = (
                results.queue_id,
                results.first_queue_offset,
                results.store_timestamp,
            )
            self._offer_made(
                lambda: _stored_texts(topic, queue_id, first, at, uniq_keys, producer),
                len(uniq_keys),
            )
            return
        events = []
        sampled = self.switch.sampled
        for message, result in zip(messages, results, strict=True):
            properties = message.properties
            msg_id = _msg_id(properties)
            if not sampled(msg_id):
                continue
            extra: dict[str, Any] = {
                "store_at": result.store_timestamp,
                "producer": producer,
                "idempotent_replay": False,
            }
            keys = _user_keys(properties)
            if keys:
                extra["keys"] = list(keys)
            in_topic = result.topic == topic
            if not in_topic:
                extra["deliver_at"] = _deliver_at(properties, result.store_timestamp)
            events.append(
                TraceEvent(
                    "stored" if in_topic else "timer_scheduled",
                    result.store_timestamp,
                    msg_id,
                    topic,
                    result.queue_id if in_topic else message.queue_id,
                    result.queue_offset if in_topic else -1,
                    detail=extra,
                    keys=keys,
                )
            )
        self._offer(events)

    # ------------------------------------------------------------------ pulls

    def queue_pulled(self, group: str | None, topic: str, views: Sequence[MessageView]) -> None:
        """A pull of one queue of ``topic`` served ``views``; for ``group`` (else: a read,
        not a delivery), they are remembered until its commit covers them."""
        if group is not None and views and self.topic_on(topic):
            self.pulled(group, views)

    def group_pulled(
        self,
        group: str,
        topic: str,
        views: Sequence[MessageView],
        start: Mapping[tuple[str, int], int],
        committed: Mapping[tuple[str, int], int] | None,
    ) -> None:
        """A group pull of ``topic`` (its retry topic too) served ``views``, from the
        group's positions ``start``; ``committed``: the positions it committed at once."""
        if not views or not self.topic_on(topic):
            return
        self.pulled(group, views)
        for key, position in (committed or {}).items():
            if position != start[key]:
                self.committed(group, key[0], key[1], start[key], position)

    def pulled(self, group: str, views: Sequence[MessageView]) -> None:
        """``group`` was served ``views`` by a pull (remembered until a commit covers them;
        a view names the topic it was read from)."""
        at = self._now()
        consumer = current_consumer()
        by_queue: dict[tuple[str, int], list[MessageView]] = {}
        for view in views:
            queue = (view[VIEW_TOPIC], view[VIEW_QUEUE_ID])
            same = by_queue.get(queue)
            if same is None:
                by_queue[queue] = [view]
            else:
                same.append(view)
        for (read_topic, queue_id), read in by_queue.items():
            retried = is_group_topic(read_topic)
            self.recent.remember(
                (group, read_topic, queue_id),
                [
                    (
                        view[VIEW_QUEUE_OFFSET],
                        (
                            view[VIEW_PROPERTIES].get(PROPERTY_UNIQ_KEY, ""),
                            view[VIEW_PROPERTIES].get(PROPERTY_RETRY_TOPIC, read_topic)
                            if retried
                            else read_topic,
                            view[VIEW_RECONSUME_TIMES] + 1,
                            view[VIEW_KEYS],
                            at,
                            consumer,
                        ),
                    )
                    for view in read
                ],
            )

    def committed(self, group: str, topic: str, queue_id: int, old: int, new: int) -> None:
        """``group`` committed ``new`` on the queue (its offset was ``old``, -1: none)."""
        key = (group, topic, queue_id)
        if old < 0:
            lowest = self.recent.lowest(key)
            old = new if lowest is None else min(lowest, new)
        if new <= old:
            return
        start = max(old, new - MAX_COMMIT_SPAN)
        served = self.recent.take(key, start, new)
        self.recent.forget_before(key, start)
        at = self._now()
        consumer = current_consumer()

        def make() -> EventTexts:
            if len(served) < new - start:
                self._read_range(topic, queue_id, start, new, served, at)
            return self._pull_texts(group, topic, queue_id, served, at, consumer)

        self._offer_made(make, 2 * (new - start))

    def _read_range(
        self, topic: str, queue_id: int, start: int, end: int, served: dict[int, Served], at: int
    ) -> None:
        """Add to ``served`` the messages of ``[start, end)`` it lacks, read from the store
        (served at ``at``, to no one known)."""
        if self._read is None:
            return
        offset = start
        while offset < end:
            if offset in served:
                offset += 1
                continue
            messages = self._read(topic, queue_id, offset, min(_READ_BATCH, end - offset))
            if not messages:
                break
            for message in messages:
                if message.queue_offset < end and message.queue_offset not in served:
                    properties = message.properties
                    first = original_topic(message.topic, properties.get(PROPERTY_RETRY_TOPIC))
                    served[message.queue_offset] = (
                        _msg_id(properties), first, message.reconsume_times + 1,
                        list(_user_keys(properties)), at, None,
                    )  # fmt: skip
            offset = max(offset + 1, messages[-1].queue_offset + 1)

    def _pull_texts(
        self,
        group: str,
        topic: str,
        queue_id: int,
        served: dict[int, Served],
        at: int,
        consumer: Consumer | None,
    ) -> EventTexts:
        """A commit's ``delivered`` and ``acked`` of each traced message, as text (the
        constant parts made once: this runs for every message a traced group consumes)."""
        switch = self.switch
        sampled = switch.sampled if switch.sample_rate < 1 else None
        decided: dict[str, bool] = {}
        head = f',"topic":{json_text(topic)},"queue_id":{queue_id},"queue_offset":'
        mid = f',"group":{json_text(group)},"attempt":'
        acker = None if consumer is None else json_text(consumer.to_json())
        receivers: dict[int, str] = {}
        texts: list[str] = []
        add = texts.append
        for offset in sorted(served):
            msg_id, first, attempt, _, served_at, who = served[offset]
            traced = decided.get(first)
            if traced is None:
                traced = decided[first] = switch.for_topic(first)
            if not msg_id or not traced or (sampled is not None and not sampled(msg_id)):
                continue
            shown = f'"{msg_id}"' if msg_id.isalnum() else json_text(msg_id)
            if who is None:
                receiver = acker or "null"
            else:  # one consumer per pull: its text made once
                receiver = receivers.get(id(who)) or receivers.setdefault(
                    id(who), json_text(who.to_json())
                )
            where = f"{head}{offset}{mid}{attempt}"
            add(
                f'{{"type":"delivered","at":{served_at},"msg_id":{shown}{where},'
                f'"consumer":{receiver},"detail":{{"via":"pull","delivered_at":{served_at}}}}}'
            )
            add(
                f'{{"type":"acked","at":{at},"msg_id":{shown}{where},'
                f'"consumer":{acker or receiver},"detail":{{"via":"pull"}}}}'
            )
        keys = _bucket_keys(topic, queue_id, min(served), max(served), group) if texts else []
        return EventTexts(texts, keys, "delivered", at)

    # ------------------------------------------------------------------ POP

    def received(self, ck_id: str) -> None:
        """A POP receive wrote the CK ``ck_id``: remember who received it."""
        consumer = current_consumer()
        if consumer is None:
            return
        receivers = self._receivers
        receivers[ck_id] = consumer
        if len(receivers) > _MAX_REMEMBERED:
            receivers.popitem(last=False)

    def pop_outcome(
        self,
        outcome: str,
        group: str,
        topic: str,
        queue_id: int,
        deliveries: Sequence[tuple[str, PopDelivery]],
        detail: dict[str, Any] | None = None,
        *,
        at: int | None = None,
        replaced_by: str | None = None,
    ) -> None:
        """POP deliveries (ck id, delivery) of the queue ended in ``outcome`` (acked, nacked,
        invisibility_changed, revived): a ``delivered`` and the outcome for each. A delivery
        whose invisibility was changed goes on under the CK ``replaced_by``: its
        ``delivered`` is not written again."""
        when = self._now() if at is None else at
        consumer = current_consumer()
        receivers = self._receivers
        shown = [
            (ck_id, delivery, receivers.get(ck_id), ck_id not in self._announced)
            for ck_id, delivery in deliveries
        ]
        for ck_id, _ in deliveries:
            self._announced.pop(ck_id, None)
        if replaced_by is not None:
            self._announced[replaced_by] = None
            receiver = receivers.get(deliveries[0][0]) if deliveries else None
            if receiver is not None:
                receivers[replaced_by] = receiver
            if len(self._announced) > _MAX_REMEMBERED:
                self._announced.popitem(last=False)

        answered = outcome in ("acked", "nacked")
        outcome_detail = {"via": "pop", **(detail or {})} if answered else dict(detail or {})

        def make() -> list[TraceEvent]:
            events: list[TraceEvent] = []
            for _, (offset, attempt, received_at, holder), remembered, first in shown:
                message = self._message_at(topic, queue_id, offset)
                if message is None or not self._traced(message):
                    continue
                receiver = remembered or Consumer(token=holder or None)
                step = TraceEvent(
                    type=outcome,
                    at=when,
                    msg_id=_msg_id(message.properties),
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=offset,
                    group=group,
                    attempt=attempt,
                    consumer=(consumer or receiver) if answered else None,
                    detail=outcome_detail,
                    keys=_user_keys(message.properties),
                )
                if first:
                    delivered = {"via": "pop", "delivered_at": received_at}
                    events.append(
                        dataclasses.replace(
                            step,
                            type="delivered",
                            at=received_at,
                            consumer=receiver,
                            detail=delivered,
                        )
                    )
                events.append(step)
            return events

        self._offer_made(make, 2 * len(deliveries))

    def _message_at(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        if self._read is None:
            return None
        found = self._read(topic, queue_id, offset, 1)
        return found[0] if found and found[0].queue_offset == offset else None

    # ------------------------------------------------------------------ copies

    def moved(
        self,
        event_type: str,
        group: str | None,
        original: StoredMessage,
        result: PutResult,
        detail: dict[str, Any],
        attempt: int | None = None,
    ) -> None:
        """A copy of ``original`` was put (sent back, dead-lettered, revived)."""
        if not self._traced(original):
            return
        properties = original.properties
        event = TraceEvent(
            event_type,
            result.store_timestamp,
            _msg_id(properties),
            result.topic,
            result.queue_id,
            result.queue_offset,
            group,
            attempt,
            None,
            detail,
            _user_keys(properties),
        )
        self._offer([event])

    def redriven(self, dead: StoredMessage, result: PutResult, new_msg_id: str) -> None:
        """A dead letter was redriven: ``result`` is its copy, ``new_msg_id`` the copy's id."""
        if not self._traced(dead):
            return
        properties = dead.properties
        event = TraceEvent(
            "redriven",
            result.store_timestamp,
            _msg_id(properties),
            result.topic,
            result.queue_id,
            result.queue_offset,
            None,
            None,
            None,
            {"target_topic": result.topic, "new_msg_id": new_msg_id},
            _user_keys(properties),
        )
        self._offer([event])

    # ------------------------------------------------------------------ timers, transactions

    def step(
        self,
        event_type: str,
        topic: str,
        msg_id: str,
        detail: dict[str, Any],
        *,
        queue_id: int = -1,
        queue_offset: int = -1,
        at: int | None = None,
        keys: tuple[str, ...] = (),
    ) -> None:
        """One step of a message of ``topic`` (a timer's or a transaction's)."""
        if not self.topic_on(topic) or not self.switch.sampled(msg_id):
            return
        when = self._now() if at is None else at
        event = TraceEvent(
            event_type, when, msg_id, topic, queue_id, queue_offset, detail=detail, keys=keys
        )
        self._offer([event])


def _bucket_keys(
    topic: str, queue_id: int, low: int, high: int, group: str | None = None
) -> list[str]:
    """The position keys of the queue's offsets ``low`` to ``high`` (see ``position_key``)."""
    return [
        position_key(topic, queue_id, bucket * BUCKET_SIZE, group)
        for bucket in range(low // BUCKET_SIZE, high // BUCKET_SIZE + 1)
    ]


def _stored_texts(
    topic: str,
    queue_id: int,
    first_offset: int,
    at: int,
    uniq_keys: list[str],
    producer: str,
) -> EventTexts:
    """The ``stored`` events of a batch of plain messages, as text."""
    head = f'{{"type":"stored","at":{at},"msg_id":'
    where = f',"topic":{json_text(topic)},"queue_id":{queue_id},"queue_offset":'
    tail = (
        f',"group":null,"attempt":null,"consumer":null,"detail":{{"store_at":{at},'
        f'"producer":{json_text(producer)},"idempotent_replay":false}}}}'
    )
    texts = [
        f"{head}{id_text(msg_id)}{where}{first_offset + index}{tail}"
        for index, msg_id in enumerate(uniq_keys)
    ]
    keys = _bucket_keys(topic, queue_id, first_offset, first_offset + len(uniq_keys) - 1)
    return EventTexts(texts, keys, "stored", at)


def store_reader(get_message: Callable[..., Any]) -> ReadMessages:
    """The store's read (``MessageStore.get_message``) as a :data:`ReadMessages`."""

    def read(topic: str, queue_id: int, offset: int, count: int) -> list[StoredMessage]:
        found: list[StoredMessage] = get_message(_READER, topic, queue_id, offset, count).messages
        return found

    return read
