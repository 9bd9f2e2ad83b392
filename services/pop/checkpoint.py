"""CK and ACK records: the POP state as messages of the revive topic.

Like RocketMQ 5's ``PopCheckPoint`` and ``AckMsg``, both are messages of a system topic,
``rmq_sys_REVIVE_LOG`` (one queue here, a single broker), tagged ``ck`` or ``ack``. They go
through the CommitLog, so a crash keeps exactly what was appended, and the in-flight state is
rebuilt by reading the revive queue again (:mod:`services.pop.inflight`).

* CK: a receive took ``offsets`` of (topic, queue) for the group at ``pop_time_ms``; they are
  invisible until ``pop_time_ms + invisible_ms``. ``ck_id`` names the checkpoint in receipt
  handles and ACKs; ``attempts`` is the delivery attempt of each offset (FIFO redelivers the
  same offset from the same queue, so the count lives here).
* ACK: these offsets of checkpoint ``ck_id`` are done. ``reason`` says why: an ``ack`` by the
  client, a ``revive`` (copied to ``%RETRY%<group>``), a ``dlq``, a ``nack`` (given back through
  send-back) or a ``change`` (replaced by a newer CK: change of invisibility).
* RESET: the group's POP state restarts. After an offset reset, each named queue has nothing
  in flight and its pop offset is the reset position; after the group was deleted
  (``deleted``), the group has no POP state at all. It undoes every CK before it in the log,
  none after it.

Bodies are compact JSON: readable with any message browser, and small next to the messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from storage import Message, StoredMessage
from storage.record.properties import PROPERTY_POP_CK as PROPERTY_POP_CK  # re-exported
from storage.topic_names import REVIVE_TOPIC as REVIVE_TOPIC  # re-exported

REVIVE_QUEUE_ID: Final = 0
REVIVE_GROUP: Final = "rmq_sys_REVIVE_GROUP"
TAG_CK: Final = "ck"
TAG_ACK: Final = "ack"
TAG_RESET: Final = "reset"


def pop_ck_value(topic: str, queue_id: int, offset: int, ck_id: str) -> str:
    """The ``POP_CK`` of a copy the revive service puts into ``%RETRY%<group>``: which
    delivery it replaces, so a restart that finds the copy but not its ACK record (a crash
    between the two appends) does not revive the message twice. Bookkeeping: no reader is
    shown it (:data:`storage.record.properties.BOOKKEEPING_PROPERTIES`)."""
    return f"{topic} {queue_id} {offset} {ck_id}"


def parse_pop_ck(value: str) -> tuple[str, int, int, str] | None:
    parts = value.split(" ")
    if len(parts) != 4:
        return None
    topic, queue_id, offset, ck_id = parts
    try:
        return topic, int(queue_id), int(offset), ck_id
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class CheckPoint:
    """One receive's take from one queue."""

    ck_id: str
    group: str
    topic: str
    queue_id: int
    offsets: tuple[int, ...]
    attempts: tuple[int, ...]
    pop_time_ms: int
    invisible_ms: int
    holder: str = ""

    @property
    def deadline_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms


@dataclass(frozen=True, slots=True)
class AckRecord:
    """Offsets of one checkpoint that are done."""

    ck_id: str
    group: str
    topic: str
    queue_id: int
    offsets: tuple[int, ...]
    reason: str = "ack"


@dataclass(frozen=True, slots=True)
class ResetRecord:
    """The group's POP state restarts: at ``positions`` (an offset reset), or everywhere with
    nothing left (``deleted``: the group was deleted)."""

    group: str
    positions: tuple[tuple[str, int, int], ...] = ()  # (topic, queue id, pop offset)
    deleted: bool = False


def checkpoint_message(ck: CheckPoint) -> Message:
    body = {
        "id": ck.ck_id,
        "g": ck.group,
        "t": ck.topic,
        "q": ck.queue_id,
        "o": list(ck.offsets),
        "a": list(ck.attempts),
        "pt": ck.pop_time_ms,
        "it": ck.invisible_ms,
        "h": ck.holder,
    }
    return _record(TAG_CK, body)


def ack_message(ack: AckRecord) -> Message:
    body = {
        "id": ack.ck_id,
        "g": ack.group,
        "t": ack.topic,
        "q": ack.queue_id,
        "o": list(ack.offsets),
        "r": ack.reason,
    }
    return _record(TAG_ACK, body)


def reset_message(reset: ResetRecord) -> Message:
    body = {
        "g": reset.group,
        "p": [list(position) for position in reset.positions],
        "d": reset.deleted,
    }
    return _record(TAG_RESET, body)


def _record(tag: str, body: dict[str, object]) -> Message:
    text = json.dumps(body, separators=(",", ":"))
    return Message(
        topic=REVIVE_TOPIC,
        body=text.encode(),
        queue_id=REVIVE_QUEUE_ID,
        properties={"TAGS": tag},
    )


def decode_record(message: StoredMessage) -> CheckPoint | AckRecord | ResetRecord | None:
    """The record a revive-topic message holds; None for anything else (never raises)."""
    try:
        body = json.loads(message.body)
        if message.tags == TAG_CK:
            return CheckPoint(
                ck_id=str(body["id"]),
                group=str(body["g"]),
                topic=str(body["t"]),
                queue_id=int(body["q"]),
                offsets=tuple(int(o) for o in body["o"]),
                attempts=tuple(int(a) for a in body["a"]),
                pop_time_ms=int(body["pt"]),
                invisible_ms=int(body["it"]),
                holder=str(body.get("h", "")),
            )
        if message.tags == TAG_ACK:
            return AckRecord(
                ck_id=str(body["id"]),
                group=str(body["g"]),
                topic=str(body["t"]),
                queue_id=int(body["q"]),
                offsets=tuple(int(o) for o in body["o"]),
                reason=str(body.get("r", "ack")),
            )
        if message.tags == TAG_RESET:
            return ResetRecord(
                group=str(body["g"]),
                positions=tuple((str(t), int(q), int(o)) for t, q, o in body["p"]),
                deleted=bool(body["d"]),
            )
    except (ValueError, KeyError, TypeError):
        return None
    return None
