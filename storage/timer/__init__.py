"""Timer messages, RocketMQ 5's design: a message due at any time waits in the CommitLog under
the timer topic; a timer log of fixed 52-byte units and a timing wheel of slots (both mapped
files) say which messages fire in which slot; a checkpoint says how far the wheel was read and
the timer topic enqueued.

``transform`` turns a producer's message into a timer message on the put path;
``timer_log``, ``timer_wheel`` and ``checkpoint`` are the three files; ``timer_store`` puts
them together (enqueue into a slot, the units of a slot, flush, recovery).
"""

from storage.timer.config import TimerConfig
from storage.timer.timer_log import MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, TimerUnit
from storage.timer.timer_store import TimerStore
from storage.timer.transform import (
    TIMER_TOPIC,
    cancel_key,
    is_cancel_marker,
    timer_tags_code,
)

__all__ = [
    "MAGIC_DEFAULT",
    "MAGIC_DELETE",
    "MAGIC_ROLL",
    "TIMER_TOPIC",
    "TimerConfig",
    "TimerStore",
    "TimerUnit",
    "cancel_key",
    "is_cancel_marker",
    "timer_tags_code",
]
