"""The timer wheel's puts, traced: a cancel marker stored is a ``timer_cancelled``, a due
message put into its topic a ``timer_fired``.

:class:`TracedTimerPuts` stands between the wheel and its puts (the appender's put and the
idempotency service's re-puts, :class:`~services.timer.service.TimerCopies`), so the wheel
itself knows nothing of the trace.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.appender import PutMessages
from services.timer.service import TimerCopies
from services.trace.tracer import Tracer
from storage import Appended, Message, PutResult, StorageError, StoredMessage
from storage.record.properties import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
)
from storage.timer import TIMER_TOPIC


class TracedTimerPuts:
    """The wheel's put and copies; what they store, told to ``tracer``."""

    def __init__(self, tracer: Tracer, put: PutMessages, copies: TimerCopies) -> None:
        self._tracer = tracer
        self._put = put
        self._copies = copies

    async def put(self, messages: Sequence[Message]) -> Appended:
        """The wheel's put (of cancel markers): a stored marker is a ``timer_cancelled``."""
        appended = await self._put(messages)
        for message in messages:
            properties = message.properties
            topic = properties.get(PROPERTY_REAL_TOPIC, "")
            if PROPERTY_TIMER_DEL_UNIQKEY in properties and self._tracer.topic_on(topic):
                deliver_at = int(properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
                uniq_key = properties.get(PROPERTY_UNIQ_KEY, "")
                self._tracer.step("timer_cancelled", topic, uniq_key, {"deliver_at": deliver_at})
        return appended

    async def reput_all(
        self,
        items: Sequence[tuple[Message, StoredMessage]],
        *,
        fresh: bool = False,
        since_ms: int | None = None,
    ) -> list[PutResult | StorageError]:
        """The wheel's copies: each due message put into its topic is a ``timer_fired``."""
        answers = await self._copies.reput_all(items, fresh=fresh, since_ms=since_ms)
        tracer = self._tracer
        for (message, _), answer in zip(items, answers, strict=True):
            topic = message.topic
            if topic == TIMER_TOPIC or not isinstance(answer, PutResult):
                continue  # a roll, or refused
            if tracer.topic_on(topic):
                tracer.step(
                    "timer_fired",
                    topic,
                    message.properties.get(PROPERTY_UNIQ_KEY, ""),
                    {"fired_at": answer.store_timestamp},
                    queue_id=answer.queue_id,
                    queue_offset=answer.queue_offset,
                    at=answer.store_timestamp,
                )
        return answers

    def find_reput(self, topic: str, source: StoredMessage, since_ms: int) -> StoredMessage | None:
        return self._copies.find_reput(topic, source, since_ms)

    async def ready(self, timeout_s: float | None = None) -> None:
        await self._copies.ready(timeout_s)
