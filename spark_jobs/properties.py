"""Which stored properties a job may send again through the HTTP API.

A stored message carries RocketMQ's system properties (set by brokers and clients) next to
its user properties. A send refuses the names the broker sets itself, and no name or value
may hold RocketMQ's separators (``\x01``, ``\x02``), which a RocketMQ producer could store
but the HTTP API refuses. Jobs that re-send messages (replay, the streaming sink) keep the
rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from storage.record.properties import BOOKKEEPING_PROPERTIES

SYSTEM_PROPERTIES: Final = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
        "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID",
        "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
        "MSG_TYPE", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "__SHARDINGKEY",
        "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", *BOOKKEEPING_PROPERTIES,
    }
)  # fmt: skip
"""RocketMQ's system property names, and spoolmq's bookkeeping ones: never sent again."""
_SEPARATORS: Final = ("\x01", "\x02")


def sendable_properties(
    properties: Mapping[str, str], system: frozenset[str] = SYSTEM_PROPERTIES
) -> tuple[dict[str, str], int]:
    """The properties a send can carry, and how many others it must leave out (names or
    values that are empty or hold a separator). ``system`` names are dropped uncounted."""
    kept: dict[str, str] = {}
    dropped = 0
    for name, value in properties.items():
        if name in system:
            continue
        if not name or not value or any(c in name or c in value for c in _SEPARATORS):
            dropped += 1
            continue
        kept[name] = value
    return kept, dropped
