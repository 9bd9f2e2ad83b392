"""The timer settings (RocketMQ's ``MessageStoreConfig`` ``timer*`` keys, same defaults)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

PRECISIONS_MS: Final = (100, 200, 500, 1000)
"""The precisions a wheel may have (RocketMQ's setter snaps to one of these)."""

TIMER_WHEEL_TTL_DAY: Final = 7
TIMER_BLANK_SLOTS: Final = 60
DEFAULT_SLOTS_TOTAL: Final = TIMER_WHEEL_TTL_DAY * 86_400


@dataclass(frozen=True, slots=True)
class TimerConfig:
    """How precise the wheel is, how far ahead a message may be timed, and the file sizes.

    The wheel has ``2 x slots_total`` slots of ``precision_ms`` each (the "now" and
    "now + TTL" halves never meet). A message due further than ``roll_window_slots`` slots
    ahead waits in an intermediate slot and is put again (it "rolls") — so its CommitLog
    record is at most one roll window old when it fires or rolls, whatever its delay: the
    roll window, not the maximum delay, must stay below the CommitLog's retention time while
    the wheel runs (:func:`check_timer_config`).
    """

    enabled: bool = True
    precision_ms: int = 1000
    max_delay_s: int = 259_200  # 3 days
    slots_total: int = DEFAULT_SLOTS_TOTAL
    roll_window_slots: int = 172_800  # 2 days of 1 s slots
    log_file_size: int = 100 * 1024 * 1024
    flush_interval_ms: int = 1000

    @property
    def roll_window_ms(self) -> int:
        return self.effective_roll_window_slots * self.precision_ms

    @property
    def effective_roll_window_slots(self) -> int:
        """Clamped to 2 … slots_total - 60, as RocketMQ does."""
        return max(2, min(self.roll_window_slots, self.slots_total - TIMER_BLANK_SLOTS))

    @property
    def wheel_span_ms(self) -> int:
        """How far the wheel reaches before a slot is used again."""
        return 2 * self.slots_total * self.precision_ms


def snap_precision(precision_ms: int) -> int:
    """The largest allowed precision not above ``precision_ms`` (at least 100 ms).

    >>> snap_precision(300), snap_precision(1000), snap_precision(5)
    (200, 1000, 100)
    """
    allowed = [p for p in PRECISIONS_MS if p <= precision_ms]
    return allowed[-1] if allowed else PRECISIONS_MS[0]


def check_timer_config(config: TimerConfig, retention_hours: float) -> list[str]:
    """What is wrong with ``config``, as sentences (empty when nothing is)."""
    problems = []
    if config.precision_ms not in PRECISIONS_MS:
        problems.append(f"timer precision must be one of {PRECISIONS_MS} ms")
    if config.slots_total <= TIMER_BLANK_SLOTS + 2:
        problems.append(f"the wheel needs more than {TIMER_BLANK_SLOTS + 2} slots")
    if config.max_delay_s <= 0:
        problems.append("the maximum timer delay must be positive")
    if config.enabled and config.roll_window_ms >= retention_hours * 3_600_000:
        problems.append(
            f"the timer roll window ({config.roll_window_ms // 1000} s) must be shorter than "
            f"the CommitLog retention ({retention_hours} h): a waiting message's record would "
            "expire before it fires or rolls"
        )
    if config.log_file_size < 1024:
        problems.append("the timer log file size must be at least 1024 bytes")
    return problems
