"""TimerStore: the timer log, the wheel and the checkpoint together (the file side of
RocketMQ's ``TimerMessageStore``).

- :meth:`place` puts one timer-topic record into the slot of its fire time, or — when that
  is a roll window or more ahead — into an intermediate slot with ``MAGIC_ROLL`` (the
  record is put again when that slot fires, and placed anew).
- :meth:`units_of_slot` walks a slot's list, oldest first.
- :meth:`begin_flush` (owner thread) and :meth:`end_flush` (any thread) make it durable in
  order: timer log, then the wheel pages as they were when the log ended there, then the
  checkpoint.
- :meth:`recover` re-applies the units written after the checkpoint to the wheel (each at
  most once), cuts the log after the last valid one, and says where enqueueing resumes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from storage.errors import StoreLoadError
from storage.timer.checkpoint import TimerCheckpoint
from storage.timer.config import TIMER_BLANK_SLOTS, TimerConfig
from storage.timer.timer_log import MAGIC_ROLL, UNIT_SIZE, TimerLog, TimerUnit
from storage.timer.timer_wheel import Slot, TimerWheel, WheelSnapshot

UnitCheck = Callable[[TimerUnit], bool]
"""Whether a unit found after the checkpoint points at the timer record it claims to."""


class FlushTicket(NamedTuple):
    """What one flush makes durable, taken at one instant on the owner thread."""

    log_end: int
    wheel: WheelSnapshot
    read_time_ms: int
    queue_offset: int


class TimerStore:
    """The timer's files under a store root."""

    def __init__(self, root: Path, config: TimerConfig) -> None:
        self.config = config
        self.precision_ms = config.precision_ms
        self.log = TimerLog(root / "timerlog", config.log_file_size)
        self.wheel = TimerWheel(root / "timerwheel", config.slots_total, config.precision_ms)
        self.checkpoint = TimerCheckpoint(root / "config" / "timercheck")
        self.read_time_ms = 0
        """Every slot before this has fired."""
        self.queue_offset = 0
        """The next offset of the timer topic's ConsumeQueue to enqueue."""

    # ------------------------------------------------------------------ time

    def slot_time(self, time_ms: int) -> int:
        """The start of the slot holding ``time_ms``."""
        return time_ms // self.precision_ms * self.precision_ms

    # ------------------------------------------------------------------ place and read

    def place(
        self, fire_ms: int, offset_py: int, size_py: int, queue_offset: int, magic: int, now_ms: int
    ) -> int:
        """Put a record due at ``fire_ms`` into the wheel (rolling it when too far); the slot
        time it went to."""
        write_time = self.slot_time(now_ms)
        slot_time = self.slot_time(fire_ms)
        window_slots = self.config.effective_roll_window_slots
        precision = self.precision_ms
        if slot_time - write_time >= window_slots * precision:
            magic |= MAGIC_ROLL
            if slot_time - write_time - window_slots * precision < window_slots // 3 * precision:
                slot_time = write_time + window_slots // 2 * precision  # room before the next roll
            else:
                slot_time = write_time + window_slots * precision
        slot = self.wheel.get_slot(slot_time)
        pos = self.log.append(
            slot.last_pos,
            magic,
            write_time,
            slot_time - write_time,
            offset_py,
            size_py,
            queue_offset,
        )
        first = pos if slot.empty else slot.first_pos
        self.wheel.put_slot(slot_time, first, pos, slot.num + 1)
        return slot_time

    def slot(self, time_ms: int) -> Slot:
        return self.wheel.get_slot(self.slot_time(time_ms))

    def units_of_slot(self, time_ms: int) -> list[TimerUnit]:
        """The units of a slot, oldest first."""
        slot = self.slot(time_ms)
        if slot.empty:
            return []
        units: list[TimerUnit] = []
        pos = slot.last_pos
        floor = self.log.min_offset
        while pos >= floor and len(units) <= slot.num:
            unit = self.log.read(pos)
            if unit is None:
                break
            units.append(unit)
            if pos == slot.first_pos:
                break
            pos = unit.prev_pos
        units.reverse()
        return units

    def waiting_units(self, slots: int, limit: int) -> list[TimerUnit]:
        """Up to ``limit`` units of the ``slots`` slots from the read time on, in slot order:
        what is waiting in the wheel (markers and rolled records included)."""
        units: list[TimerUnit] = []
        for slot in self.wheel.occupied(self.read_time_ms, slots):
            units.extend(self.units_of_slot(slot.time_ms))
            if len(units) >= limit:
                return units[:limit]
        return units

    # ------------------------------------------------------------------ flush

    def begin_flush(self) -> FlushTicket:
        """Take what the next flush writes (owner thread, between two placements)."""
        return FlushTicket(
            self.log.max_offset, self.wheel.snapshot(), self.read_time_ms, self.queue_offset
        )

    def end_flush(self, ticket: FlushTicket) -> None:
        """Timer log, then the wheel, then the checkpoint (any thread; one at a time)."""
        self.log.flush()
        self.wheel.write_snapshot(ticket.wheel)
        checkpoint = self.checkpoint
        checkpoint.last_read_time_ms = ticket.read_time_ms
        checkpoint.last_timer_log_flush_pos = ticket.log_end
        checkpoint.last_timer_queue_offset = ticket.queue_offset
        checkpoint.precision_ms = self.precision_ms
        checkpoint.flush()
        self.log.delete_files_written_before(ticket.read_time_ms - self.config.roll_window_ms)

    # A unit goes at most a roll window ahead of its write time (a farther one rolls), so a
    # file whose last unit was written a roll window before the read time holds fired units
    # only; it goes once the checkpoint says so (recovery never reads below the checkpoint).

    # ------------------------------------------------------------------ recovery

    def recover(self, unit_is_valid: UnitCheck, now_ms: int) -> list[str]:
        """Load the files and bring the wheel up to the last valid unit; findings as text."""
        checkpoint = self.checkpoint
        if checkpoint.written and checkpoint.precision_ms != self.precision_ms:
            raise StoreLoadError(
                f"the timer wheel was written with a precision of {checkpoint.precision_ms} ms, "
                f"not {self.precision_ms} ms: start with that precision, or let every timer "
                "message fire first"
            )
        log = self.log
        log.load()
        findings: list[str] = []
        start = max(checkpoint.last_timer_log_flush_pos, log.min_offset)
        end = start
        queue_offset = checkpoint.last_timer_queue_offset
        revised = 0
        earliest = None  # the first slot among units the checkpoint does not know of
        for unit in log.scan(start):
            if not unit_is_valid(unit):
                findings.append(f"timer log: unit at {unit.pos} points at no timer record; cut")
                break
            revised += self.wheel.revise_slot(unit.fire_ms, unit.pos, 1)
            end = unit.pos + UNIT_SIZE
            queue_offset = max(queue_offset, unit.queue_offset + 1)
            earliest = unit.fire_ms if earliest is None else min(earliest, unit.fire_ms)
        if log.queue.files and log.queue.max_offset != end:
            log.truncate(end)
        if revised:
            findings.append(
                f"timer log: {revised} units after the checkpoint put back in the wheel"
            )
        self.queue_offset = queue_offset
        self.read_time_ms = self._recovered_read_time(now_ms, earliest)
        return findings

    def _recovered_read_time(self, now_ms: int, earliest: int | None) -> int:
        """The checkpoint's read time (now, when there is none), or the first slot of the
        units it does not know of when that is earlier; never older than the wheel reaches
        back."""
        now_slot = self.slot_time(now_ms)
        read_time = self.checkpoint.last_read_time_ms if self.checkpoint.written else now_slot
        if earliest is not None:
            read_time = min(read_time, self.slot_time(earliest))
        oldest = now_slot - (self.config.slots_total - TIMER_BLANK_SLOTS) * self.precision_ms
        return max(read_time, oldest)

    def close(self) -> None:
        self.log.close()
        self.wheel.close()
        self.checkpoint.close()
