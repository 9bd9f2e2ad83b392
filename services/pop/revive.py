"""The revive service: what was not acked before its invisibility ended comes back.

An asyncio task sleeps until the earliest deadline in the in-flight table (it is woken when a
receive or a change of invisibility schedules an earlier one) and then, for each due message:

* normal group: puts a copy into ``%RETRY%<group>`` with ``reconsume_times + 1`` (RocketMQ's
  ``PopReviveService``), or, once ``reconsume_times`` reached the group's ``retry_max_times``,
  sends it to ``%DLQ%<group>`` through send-back; then writes an ACK record (reason ``revive``
  or ``dlq``) so that a restart does not revive it again;
* FIFO group: marks it ready; the queue's next receive delivers it first, from the same queue,
  with the attempt + 1 — or, past ``retry_max_times``, it goes to the DLQ and the queue moves on.

The copy and its ACK record are appended back to back, before either waits for the flush.
The copy is a re-put keyed by the message it copies (:meth:`IdempotencyService.reput`): a
crash after the copy but before its ACK record revives the message again at the restart,
and that revive finds the copy instead of storing a second one.
"""

from __future__ import annotations

import asyncio
import logging
import random

from services.background import BackgroundLoop
from services.idempotency import RePut
from services.pop.checkpoint import PROPERTY_POP_CK, AckRecord, ack_message, pop_ck_value
from services.pop.inflight import Due, InFlight
from services.pop.service import PopService, now_ms
from services.pop.tracing import trace_outcome
from services.send_back import PERM_READ_WRITE, SendBackRequest, retry_message
from services.topics import TopicService
from storage import Message, StoredMessage
from storage.config_managers import SubscriptionGroupConfig, TopicConfig
from storage.record.properties import PROPERTY_ORIGIN_MESSAGE_ID
from storage.topic_names import retry_topic

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE_MS = 1000
"""A revive that could not be written (store not writeable) is tried again this much later."""


class ReviveService:
    """Wakes at the earliest deadline and redelivers what is due."""

    def __init__(
        self,
        pop: PopService,
        topics: TopicService,
        reput: RePut,
        rng: random.Random | None = None,
    ) -> None:
        self._pop = pop
        self._topics = topics
        self._reput = reput
        self._rng = rng or random.Random()
        self._loop = BackgroundLoop("pop-revive", self._revive_due, self._until_earliest_deadline)
        self._earliest: int | None = None
        pop.on_schedule = self.scheduled

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    def scheduled(self, deadline_ms: int) -> None:
        """A deadline was added: wake the task when it is earlier than the one it waits for."""
        if self._earliest is None or deadline_ms < self._earliest:
            self._loop.wake()

    def _until_earliest_deadline(self) -> float | None:
        """Seconds until the earliest deadline in the table (None: there is none)."""
        self._earliest = self._pop.table.next_deadline()
        return None if self._earliest is None else max(0, self._earliest - now_ms()) / 1000

    async def _revive_due(self) -> None:
        self._earliest = None
        table = self._pop.table
        for due in table.pop_due(now_ms()):
            try:
                await self.revive(due)
            except Exception:
                log.exception("revive of %s offset %d failed; trying again", due.key, due.offset)
                entry = table.entry(due.key, due.offset)
                if entry is not None and entry.ck_id == due.ck_id:
                    entry.deadline_ms = now_ms() + RETRY_AFTER_FAILURE_MS
                    entry.busy = False
                    table.schedule(due.key, entry)

    async def revive(self, due: Due) -> None:
        """Redeliver one due message (no-op when it was acked or changed meanwhile)."""
        pop = self._pop
        entry = pop.table.entry(due.key, due.offset)
        if entry is None or entry.ck_id != due.ck_id or entry.busy or entry.ready:
            return
        group_name, _, _ = due.key
        group = pop.group_config(group_name) or SubscriptionGroupConfig(group_name)
        pop.metrics.pop_expired += 1
        message = pop.message_at(due.key, due.offset)
        if group.fifo and message is not None and entry.attempt - 1 < group.retry_max_times:
            entry.ready = True
            pop.after_change(due.key)
            return
        entry.busy = True
        revived_at = now_ms()
        ack = ack_message(AckRecord(entry.ck_id, *due.key, (due.offset,), "revive"))
        trace_outcome(pop.tracer, "revived", due.key, [(entry.ck_id, entry)], revived_at)
        if message is not None:
            if message.reconsume_times >= group.retry_max_times or (
                group.fifo and entry.attempt - 1 >= group.retry_max_times
            ):
                await self._dead_letter(group, message, due, entry)
                pop.metrics.pop_dead_lettered += 1
                return
            copy = await self._retry_copy(group, message)
            copy.properties[PROPERTY_POP_CK] = pop_ck_value(*due.key[1:], due.offset, entry.ck_id)
            await asyncio.gather(self._reput(copy, message), pop.put([ack]))
            pop.metrics.pop_redelivered += 1
        else:  # it has left the store: nothing to redeliver
            await pop.put([ack])
        pop.table.resolve(due.key, due.offset, entry.ck_id)
        pop.after_change(due.key)

    async def _dead_letter(
        self, group: SubscriptionGroupConfig, message: StoredMessage, due: Due, entry: InFlight
    ) -> None:
        pop = self._pop
        await asyncio.gather(
            pop.send_back.send_back(
                SendBackRequest(
                    group.group_name,
                    commit_log_offset=message.physical_offset,
                    delay_level=-1,
                    max_reconsume_times=group.retry_max_times,
                )
            ),
            pop.put([ack_message(AckRecord(entry.ck_id, *due.key, (due.offset,), "dlq"))]),
        )
        pop.table.resolve(due.key, due.offset, entry.ck_id)
        pop.after_change(due.key)

    async def _retry_copy(self, group: SubscriptionGroupConfig, original: StoredMessage) -> Message:
        """The message again, in ``%RETRY%<group>``, with ``reconsume_times + 1`` and no delay."""
        count = max(1, group.retry_queue_nums)
        topic = retry_topic(group.group_name)
        await self._topics.ensure(
            TopicConfig(topic, read_queue_nums=count, write_queue_nums=count, perm=PERM_READ_WRITE)
        )
        origin_id = original.properties.get(PROPERTY_ORIGIN_MESSAGE_ID) or original.msg_id
        queue_id = self._rng.randrange(count)
        return retry_message(original, topic, queue_id, origin_id, group.retry_max_times)
