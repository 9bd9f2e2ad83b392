"""TimerService: timer messages from the CommitLog into the wheel, and out of it when due
(RocketMQ 5's ``TimerMessageStore`` services, on the event loop).

One task does, in turn:

1. **Enqueue** (``TimerEnqueueGetService`` + ``TimerEnqueuePutService``): every new unit of
   the timer topic's ConsumeQueue goes into the wheel at its fire time (the tags code;
   negated for a cancel marker), or into the slot being collected when that time has passed.
2. **Fire** (``TimerDequeueGetService`` and the services after it): once a slot's time plus
   one precision has passed, and only when everything sent before then is enqueued, its
   cancel markers are read, then its records: a cancelled one is dropped, a rolled one is
   put to the timer topic again, the rest go to their real topic. Every copy carries a key
   made of its timer record's offset (:meth:`IdempotencyService.reput_all`): a slot that
   may have fired before a crash or a failover (one due before the service started, with a
   margin) looks for an earlier copy first and stores nothing twice inside the dedup window;
   later slots cannot have fired before and put straight away. A chunk of puts waits for
   durability once, and the read time moves past a slot only once all its puts are durable.
3. **Wait** for the next slot's time or for a new timer unit.

A second task flushes every second: CommitLog, timer log, the wheel pages as they were at
that instant, then the checkpoint (:meth:`TimerStore.begin_flush`). It runs on a master only.

**Cancel** (RocketMQ's recall): a handle names the topic, the fire time and the message's
uniq key. Until its slot is decided the cancel is remembered in memory and a cancel marker
(``TIMER_DEL_UNIQKEY``) is put durably, landing in the same slot; afterwards the answer says
whether the message was delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import struct
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol

from services.appender import PutMessages
from services.background import BackgroundLoop, OnFailure
from services.errors import (
    BrokerUnavailableError,
    InvalidTimerHandleError,
    TimerAlreadyDeliveredError,
    TimerNotFoundError,
)
from services.metrics import Histogram
from services.timer.delivery import due_message, marker_key, rolled_message, target_key
from services.timer.handles import TimerHandle, decode_handle
from services.timer.progress_file import MasterTimerProgress, load_progress
from services.timer.recall import (
    CancelOutcome,
    CancelResult,
    cancel_marker,
    find_timer_record,
)
from services.timer.upcoming import UpcomingTimers, upcoming_of
from storage import Message, MessageStore, PutResult, StorageError, StoredMessage
from storage.errors import MessageRejectedError
from storage.record.layout import CQ_UNIT_SIZE, PRE_BLANK_SIZE
from storage.record.properties import (
    PROPERTY_REAL_TOPIC,
)
from storage.timer import (
    MAGIC_DEFAULT,
    MAGIC_DELETE,
    MAGIC_ROLL,
    TIMER_TOPIC,
    TimerStore,
    TimerUnit,
    cancel_key,
)
from storage.timer.timer_store import FlushTicket

log = logging.getLogger(__name__)

Clock = Callable[[], float]

ENQUEUE_BUDGET: Final = 20_000  # units per turn of the loop
PUT_CHUNK: Final = 500  # puts appended between two yields, with one wait for durability
RETRY_AFTER_FAILED_PUT_S: Final = 0.1
FIRED_ELSEWHERE_MARGIN_MS: Final = 10_000
"""Slots due up to this long after the service started may have fired in an earlier process
(or on the old master, whose clock may differ a little): their puts look for an earlier
copy first. Later slots cannot have fired before, and put straight away."""
LATENESS_BUCKETS_S: Final = (0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
_UNIT: Final = struct.Struct(">qiq")


class TimerCopies(Protocol):
    """How the wheel puts each copy once and finds an earlier one
    (:class:`services.idempotency.IdempotencyService`)."""

    def reput_all(
        self,
        items: Sequence[tuple[Message, StoredMessage]],
        *,
        fresh: bool = False,
        since_ms: int | None = None,
    ) -> Awaitable[list[PutResult | StorageError]]: ...

    def find_reput(
        self, topic: str, source: StoredMessage, since_ms: int
    ) -> StoredMessage | None: ...

    async def ready(self, timeout_s: float | None = ...) -> None: ...


@dataclasses.dataclass(slots=True)
class TimerStats:
    """What the timer did since the broker started."""

    scheduled: int = 0  # timer records placed in the wheel (a rolled one again at each roll)
    delivered: int = 0
    cancels_accepted: int = 0  # cancels answered CANCELLED (a repeat is not counted again)
    cancelled: int = 0  # dropped at their slot because of a cancel
    rolled: int = 0
    rolled_elsewhere: int = 0  # rebuilt records whose roll the old master had put already
    lost: int = 0  # records gone from the CommitLog before their slot fired
    delivered_by_topic: Counter[str] = dataclasses.field(default_factory=Counter)
    cancelled_by_topic: Counter[str] = dataclasses.field(default_factory=Counter)
    lateness: Histogram = dataclasses.field(default_factory=lambda: Histogram(LATENESS_BUCKETS_S))


@dataclasses.dataclass(frozen=True, slots=True)
class TimerProgress:
    precision_ms: int
    read_time_ms: int  # every slot before this has fired
    enqueued_offset: int  # of the timer topic's ConsumeQueue
    max_offset: int
    stats: TimerStats

    @property
    def enqueue_behind(self) -> int:
        return max(0, self.max_offset - self.enqueued_offset)


class TimerService:
    """Runs the wheel of one master."""

    def __init__(
        self,
        store: MessageStore,
        put: PutMessages,
        copies: TimerCopies,
        group: str,
        clock: Clock = time.time,
        *,
        broker_name: str | None = None,
        fired_horizon_ms: int = 300_000,
    ) -> None:
        self._store = store
        self._put = put
        self._copies = copies
        self.group = group
        self.broker_name = broker_name or group  # what handles issued before named
        self._clock = clock
        self.config = store.config.timer
        self.precision_ms = self.config.precision_ms
        self.stats = TimerStats()
        self._timer: TimerStore | None = None
        self._drained = False  # the last turn placed every unit that had arrived
        self._wheel = BackgroundLoop(
            "timer-wheel",
            self._turn,
            self._until_next_turn,
            step_first=True,
            on_failure=OnFailure(  # a bug must not stop timer delivery for good
                log, "the timer wheel failed a turn; retrying", RETRY_AFTER_FAILED_PUT_S
            ),
        )
        self._flusher = BackgroundLoop(
            "timer-flush", self._flush, self.config.flush_interval_ms / 1000
        )
        # Placements at or after this slot are still collected; it is the read time, or the
        # slot after the one being fired.
        self._open_from = 0
        # Every slot up to this one has been decided: its cancels are too late.
        self._decided_through = -1
        self._cancels: dict[int, set[str]] = {}
        self._started_ms = 0
        # A wheel rebuilt from the timer topic alone (a promoted slave): timer records below
        # this ConsumeQueue offset are placed again, and when their slot comes each looks for
        # the copy the old master may have put (its delivery, or its roll). Without a key
        # index nothing can be looked up: those due before ``_skip_before`` are taken as fired
        # by the old master, the last ``fired_horizon_ms`` are fired again.
        self._fired_horizon_ms = fired_horizon_ms
        self._rebuild_until = 0
        self._skip_before = 0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Load and recover the timer files, then start enqueueing and firing."""
        self._started_ms = self._now_ms()
        self._timer = await asyncio.to_thread(self._open)
        self._plan_rebuild(self._timer)
        self._open_from = self._timer.read_time_ms
        self._decided_through = self._timer.read_time_ms - self.precision_ms
        self._store.arrival_listeners.append(self._on_arrival)
        self._wheel.start()
        self._flusher.start()

    def _open(self) -> TimerStore:
        timer = TimerStore(self._store.root, self.config)
        try:
            for finding in timer.recover(self._unit_is_valid, self._now_ms()):
                log.warning("%s", finding)
        except BaseException:
            timer.close()
            raise
        return timer

    def _plan_rebuild(self, timer: TimerStore) -> None:
        """A wheel that starts empty over a timer topic that is not (this broker was a slave:
        it replicated the records but never ran the wheel) is rebuilt from the topic."""
        if timer.checkpoint.written or timer.log.max_offset > 0:
            return
        self._rebuild_until = self._store.max_offset_in_queue(TIMER_TOPIC, 0)
        if not self._rebuild_until:
            return
        progress = load_progress(self._store.root / "config")
        if progress is not None and self._store.max_physical_offset >= progress.commit_offset:
            self._skip_before = progress.read_time_ms
            log.warning(
                "timer wheel rebuilt from %d timer records: those due before %d were fired by "
                "the previous master (its last copied progress); each later due one is "
                "delivered unless its copy is found",
                self._rebuild_until,
                progress.read_time_ms,
            )
            return
        if self._store.keyed.enabled:
            log.warning(
                "timer wheel rebuilt from %d timer records: each due one is delivered unless "
                "the previous master's copy of it is found",
                self._rebuild_until,
            )
            return
        self._skip_before = self._started_ms - self._fired_horizon_ms
        log.warning(
            "timer wheel rebuilt from %d timer records without a key index: those due more "
            "than %d s ago are taken as delivered by the previous master",
            self._rebuild_until,
            self._fired_horizon_ms // 1000,
        )

    def _unit_is_valid(self, unit: TimerUnit) -> bool:
        """A unit found after the checkpoint names the ConsumeQueue unit it came from."""
        queue = self._store.find_consume_queue(TIMER_TOPIC, 0)
        found = None if queue is None else queue.get_unit(unit.queue_offset)
        return found is not None and found[0] == unit.offset_py and found[1] == unit.size_py

    async def stop(self) -> None:
        """Stop the tasks, flush the timer files and close them."""
        with contextlib.suppress(ValueError):
            self._store.arrival_listeners.remove(self._on_arrival)
        await self._stop_loops()
        timer = self._timer
        if timer is not None:
            ticket = timer.begin_flush()
            await asyncio.to_thread(self._write, ticket)
            timer.close()
            self._timer = None

    async def _stop_loops(self) -> None:
        """Stop the wheel and the flusher (no final flush: :meth:`stop` writes it)."""
        await asyncio.gather(self._wheel.stop(), self._flusher.stop())

    def master_progress(self) -> MasterTimerProgress | None:
        """What a slave copies: the read time, and the CommitLog's end, below which every
        copy of a record due before it lies (None when the wheel is not running)."""
        timer = self._timer
        if timer is None:
            return None
        return MasterTimerProgress(timer.read_time_ms, self._store.max_physical_offset)

    def _require_timer(self) -> TimerStore:
        if self._timer is None:
            raise RuntimeError("the timer service is not running")
        return self._timer

    def progress(self) -> TimerProgress | None:
        """Where the wheel stands; None when it is not running (a slave, timers off)."""
        timer = self._timer
        if timer is None:
            return None
        return TimerProgress(
            self.precision_ms,
            timer.read_time_ms,
            timer.queue_offset,
            self._store.max_offset_in_queue(TIMER_TOPIC, 0),
            self.stats,
        )

    def upcoming(
        self, topic: str | None = None, *, next_count: int = 50, scan_limit: int = 20_000
    ) -> UpcomingTimers | None:
        """What waits in the wheel (of ``topic``, or all), read slot by slot from the read time
        over the roll window, at most ``scan_limit`` units; None when the wheel is not
        running."""
        timer = self._timer
        if timer is None:
            return None
        units = timer.waiting_units(timer.config.effective_roll_window_slots + 1, scan_limit)
        cancelled = set().union(*self._cancels.values()) if self._cancels else set()
        records: list[tuple[StoredMessage, bool]] = []
        for unit in units:
            record = self._store.look_message_by_offset(unit.offset_py)
            if record is None:
                continue
            if _is_marker(unit):
                key = marker_key(record)
                if key:
                    cancelled.add(key)
            elif not unit.magic & MAGIC_DELETE:
                records.append((record, bool(unit.magic & MAGIC_ROLL)))
        now = self._now_ms()
        counts, soonest = upcoming_of(
            records,
            cancelled,
            now,
            topic=topic,
            next_count=next_count,
            precision_ms=self.precision_ms,
        )
        return UpcomingTimers(now, counts, soonest, len(units), len(units) < scan_limit)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        if topic == TIMER_TOPIC:
            self._wheel.wake()

    # ------------------------------------------------------------------ the loop

    async def _turn(self) -> None:
        """Place the units that arrived; once none is left, fire the due slots."""
        self._drained = self._enqueue_available()
        if self._drained:
            await self._fire_due_slots()

    def _until_next_turn(self) -> float:
        """No pause while units are left to place, or arrived meanwhile (a turn for the other
        tasks between budgets); else until the next slot is due, or a unit arrives."""
        timer = self._require_timer()
        if not self._drained or self._store.max_offset_in_queue(TIMER_TOPIC, 0) > (
            timer.queue_offset
        ):
            return 0
        return (timer.read_time_ms + self.precision_ms - self._now_ms()) / 1000

    def _enqueue_available(self) -> bool:
        """Place new timer units in the wheel; True when none are left."""
        timer = self._require_timer()
        queue = self._store.find_consume_queue(TIMER_TOPIC, 0)
        if queue is None:
            return True
        offset = max(timer.queue_offset, queue.min_offset)
        end = min(queue.max_offset, offset + ENQUEUE_BUDGET)
        now = self._now_ms()
        place = timer.place
        open_from = self._open_from
        rebuild_until, skip_before = self._rebuild_until, self._skip_before
        while offset < end:
            chunk = queue.get_units(offset, (end - offset) * CQ_UNIT_SIZE)
            if chunk is None:
                break
            data, _ = chunk
            for physical, size, code in _UNIT.iter_unpack(
                data[: len(data) // CQ_UNIT_SIZE * CQ_UNIT_SIZE]
            ):
                rebuilt = offset < rebuild_until
                if (
                    size != PRE_BLANK_SIZE
                    and code != 0
                    and not (rebuilt and abs(code) < skip_before)
                ):
                    if code > 0:
                        place(max(code, open_from), physical, size, offset, MAGIC_DEFAULT, now)
                        self.stats.scheduled += 1
                    else:  # a cancel marker goes to its target's slot, even one being fired
                        slot = max(-code, open_from) if rebuilt else -code
                        place(slot, physical, size, offset, MAGIC_DELETE, now)
                offset += 1
        timer.queue_offset = offset
        return offset >= queue.max_offset

    async def _fire_due_slots(self) -> None:
        timer = self._require_timer()
        precision = self.precision_ms
        turns = 0
        while timer.read_time_ms + precision <= self._now_ms():
            turns += 1
            if turns % 1000 == 0:
                await asyncio.sleep(0)  # catching up on many slots: let others run
            slot = timer.read_time_ms
            if not timer.slot(slot).empty or slot in self._cancels:
                await self._fire(timer, slot)
            else:
                self._decided_through = slot
            timer.read_time_ms = slot + precision
            self._open_from = timer.read_time_ms
            if not self._enqueue_available():
                return  # more arrived meanwhile: enqueue them before the next slot

    # ------------------------------------------------------------------ firing a slot

    async def _fire(self, timer: TimerStore, slot: int) -> None:
        """Deliver, roll or drop every record of ``slot``: its cancel markers first, then the
        rest a chunk at a time (read, decide, put)."""
        self._open_from = slot + self.precision_ms  # from here on, late arrivals go later
        units = timer.units_of_slot(slot)
        cancelled = self._cancelled_in(slot, [u for u in units if _is_marker(u)])
        self._decided_through = slot  # a cancel from now on comes too late
        fresh = slot + self.precision_ms > self._started_ms + FIRED_ELSEWHERE_MARGIN_MS
        others = [u for u in units if not _is_marker(u)]
        seen: set[str] = set()
        for start in range(0, len(others), PUT_CHUNK):
            chunk = others[start : start + PUT_CHUNK]
            if not fresh and any(u.queue_offset < self._rebuild_until for u in chunk):
                chunk = await self._without_rolled_elsewhere(chunk)
            outgoing = self._outgoing(chunk, cancelled, seen)
            await self._put_all(outgoing, fresh=fresh)
            lateness = max(0, self._now_ms() - slot - self.precision_ms) / 1000
            for message, _ in outgoing:
                if message.topic != TIMER_TOPIC:
                    self.stats.lateness.observe(lateness)

    async def _without_rolled_elsewhere(self, units: list[TimerUnit]) -> list[TimerUnit]:
        """Rebuilt records the old master rolled are left out: their re-put, in the timer
        topic and placed itself, decides (a copy's key belongs to its real topic, so the
        lookup finds a roll or a delivery). Waits for the key index to cover what was
        replicated."""
        await self._copies.ready(None)
        kept: list[TimerUnit] = []
        for unit in units:
            record = None
            if unit.queue_offset < self._rebuild_until and not unit.magic & MAGIC_ROLL:
                record = self._store.look_message_by_offset(unit.offset_py)
            real_topic = None if record is None else record.properties.get(PROPERTY_REAL_TOPIC)
            if record is not None and real_topic:
                since = record.store_timestamp - FIRED_ELSEWHERE_MARGIN_MS
                copy = self._copies.find_reput(real_topic, record, since)
                if copy is not None and copy.topic == TIMER_TOPIC:
                    self.stats.rolled_elsewhere += 1
                    continue
            kept.append(unit)
        return kept

    def _cancelled_in(self, slot: int, markers: list[TimerUnit]) -> set[str]:
        """The keys cancelled in ``slot``: by its markers, and by cancels not stored yet."""
        cancelled = self._cancels.pop(slot, set())
        for unit in markers:
            record = self._look(unit)
            key = None if record is None else marker_key(record)
            if key:
                cancelled.add(key)
        return cancelled

    def _outgoing(
        self, units: list[TimerUnit], cancelled: set[str], seen: set[str]
    ) -> list[tuple[Message, StoredMessage]]:
        """What these records of a fired slot become. Two records of one message in a slot
        (a rebuilt wheel holds a rolled record and its re-put) deliver it once: ``seen``."""
        outgoing: list[tuple[Message, StoredMessage]] = []
        now = self._now_ms()
        for unit in units:
            record = self._look(unit)
            if record is None:
                continue
            if unit.magic & MAGIC_ROLL:
                outgoing.append((rolled_message(record), record))
                self.stats.rolled += 1
                continue
            key = target_key(record)
            if key in cancelled:
                self.stats.cancelled += 1
                self.stats.cancelled_by_topic[record.properties.get(PROPERTY_REAL_TOPIC, "")] += 1
            elif key is None or key not in seen:
                message = due_message(record, now)
                if message is not None:
                    outgoing.append((message, record))
                    if key is not None:
                        seen.add(key)
        return outgoing

    def _look(self, unit: TimerUnit) -> StoredMessage | None:
        record = self._store.look_message_by_offset(unit.offset_py)
        if record is None:
            self.stats.lost += 1
            log.warning("timer record at %d is gone (expired?)", unit.offset_py)
        return record

    async def _put_all(self, outgoing: list[tuple[Message, StoredMessage]], *, fresh: bool) -> None:
        """Put every message once, a chunk at a time; retry while the store refuses."""
        pending = outgoing
        while pending:
            failed: list[tuple[Message, StoredMessage]] = []
            for start in range(0, len(pending), PUT_CHUNK):
                chunk = pending[start : start + PUT_CHUNK]
                # A copy is never older than its record (give or take the clocks of two
                # masters): look back that far, not just over the dedup window.
                since = min(source.store_timestamp for _, source in chunk)
                answers = await self._copies.reput_all(
                    chunk, fresh=fresh, since_ms=since - FIRED_ELSEWHERE_MARGIN_MS
                )
                for item, answer in zip(chunk, answers, strict=True):
                    if isinstance(answer, MessageRejectedError):
                        log.error("timer message for %s refused: %s", item[0].topic, answer)
                    elif isinstance(answer, StorageError):
                        failed.append(item)
                    elif item[0].topic != TIMER_TOPIC:
                        self.stats.delivered += 1
                        self.stats.delivered_by_topic[item[0].topic] += 1
                await asyncio.sleep(0)  # let sends and pulls in between chunks
            if failed:
                log.warning("%d timer messages not put yet; retrying", len(failed))
                await asyncio.sleep(RETRY_AFTER_FAILED_PUT_S)
            pending = failed

    # ------------------------------------------------------------------ flush

    async def _flush(self) -> None:
        ticket = self._require_timer().begin_flush()
        try:
            await asyncio.to_thread(self._write, ticket)
        except OSError:
            log.exception("could not flush the timer files; will retry")

    def _write(self, ticket: FlushTicket) -> None:
        """CommitLog first (the timer log never names a record a power cut could take back),
        then the timer files."""
        self._store.flush_commit_log()
        self._require_timer().end_flush(ticket)

    # ------------------------------------------------------------------ cancel

    def handle_for(self, topic: str, fire_ms: int, uniq_key: str) -> str:
        """The cancel handle of a timer message sent to ``topic``."""
        return TimerHandle(topic, self.group, fire_ms + 1, uniq_key).encode()

    def _check_issuer(self, parsed: TimerHandle) -> None:
        """A handle naming another group (or, issued before, another broker) is honoured
        when the message it names is found here — a handle of the old master after a
        failover; without a key index nothing can be found, and it is refused."""
        own = self.group if parsed.names_group else self.broker_name
        if parsed.issuer != own and not self._store.keyed.enabled:
            kind = "group" if parsed.names_group else "broker"
            raise InvalidTimerHandleError(
                f"the handle is for {kind} {parsed.issuer!r}; this is {own!r}"
            )

    async def cancel(self, topic: str, handle: str) -> CancelResult:
        """Cancel the timer message ``handle`` names; TimerAlreadyDeliveredError once its slot
        has fired."""
        parsed = decode_handle(handle)
        if parsed.topic != topic:
            raise InvalidTimerHandleError(
                f"the handle is for topic {parsed.topic!r}, not {topic!r}"
            )
        self._check_issuer(parsed)
        timer = self._timer
        if timer is None:
            raise BrokerUnavailableError("the timer wheel is not running on this broker")
        slot = timer.slot_time(parsed.fire_ms)
        key = cancel_key(topic, parsed.uniq_key)
        target, marked = find_timer_record(self._store, topic, parsed.uniq_key)
        result = CancelResult(CancelOutcome.CANCELLED, topic, parsed.uniq_key, parsed.fire_ms)
        if target is None and not marked and self._store.keyed.enabled:
            raise TimerNotFoundError(f"no timer message of {topic} has this handle")
        if marked or key in self._cancels.get(slot, ()):
            return dataclasses.replace(result, outcome=CancelOutcome.ALREADY_CANCELLED)
        if slot <= self._decided_through:
            raise TimerAlreadyDeliveredError(
                f"the timer message {parsed.uniq_key} of {topic} was delivered at its time "
                f"({parsed.fire_ms + self.precision_ms} ms since the epoch, or just after); "
                "it can no longer be cancelled"
            )
        # Memory holds the cancel for the slot about to fire; the marker, stored before the
        # answer, holds it across a crash (it goes to the target's slot even when that slot
        # is being fired: a restart fires it again).
        self._cancels.setdefault(slot, set()).add(key)
        try:
            await self._put([cancel_marker(topic, parsed, key, slot)])
        except BaseException:
            self._cancels.get(slot, set()).discard(key)
            raise
        self.stats.cancels_accepted += 1
        return result


def _is_marker(unit: TimerUnit) -> bool:
    """A cancel marker that has come to its slot (a rolled one is put again, as any)."""
    return bool(unit.magic & MAGIC_DELETE and not unit.magic & MAGIC_ROLL)
