"""What a send holds besides where it goes: whether its messages are bodies alone (the lean
paths), and the fingerprint a repeat of a keyed send must match (:mod:`services.idempotency`).

The fingerprint is stored in the first record of every keyed send, so what it is made of may
not change between versions without the older form still being matched:

- **now** (``2:`` and 32 hex digits): SHA-256 over the repr of the send's lengths, delay
  levels and extras (below), then each body's CRC (the record's BODYCRC, ``zlib.crc32`` masked
  to 31 bits, four bytes big-endian each). The lean batch's encoder takes those CRCs as made
  here instead of computing them again, so a keyed batch hashes a few hundred bytes, not its
  bodies (SHA-256 of a 100 x 1 KiB batch's bodies was half of what its key cost the broker).
  Two payloads that differ only in bodies of the same length and CRC share a fingerprint: a
  key reused that way (one chance in 2^31 for unrelated bodies; CRC-32 is linear, so a body can
  be built to match) is answered as a repeat, not refused. Brokers before this form compare
  stored values as strings and read it as another payload (upgrade slaves first).
- **before** (32 hex digits, no prefix): SHA-256 over the bodies themselves, then the same
  repr. A repeat of a send stored so is matched against that form (:meth:`Fingerprint.matches`).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from operator import attrgetter
from typing import Final

from services.outgoing import NO_PROPERTIES, OutgoingMessage
from storage.record.layout import body_crc, body_crcs

_EXTRAS: Final = attrgetter(
    "tags", "keys", "properties", "delay_level", "deliver_after_ms", "deliver_at"
)
_NO_EXTRAS: Final = (None, (), NO_PROPERTIES, 0, None, None)
"""What a message sends besides its body and where it goes, and that of a body alone."""
_BODY: Final = attrgetter("body")

VERSION: Final = "2:"
"""How a fingerprint made from the bodies' CRCs starts (the earlier form has no prefix)."""


class Fingerprint:
    """A keyed send's fingerprint: ``value`` is stored with it and compared with a repeat's;
    the earlier form is made only when a stored value has it (:meth:`matches`)."""

    __slots__ = ("_bodies", "_described", "value")

    def __init__(self, value: str, bodies: list[bytes], described: str) -> None:
        self.value = value
        self._bodies = bodies
        self._described = described

    def matches(self, stored: str | None) -> bool:
        """Whether ``stored``, the fingerprint of an earlier send with the key, is this
        payload's, in either form."""
        if stored == self.value:
            return True
        if stored is None or stored.startswith(VERSION):
            return False
        return stored == earlier_form(self._bodies, self._described)

    def __repr__(self) -> str:
        return f"Fingerprint({self.value!r})"


def bodies_alone(messages: Sequence[OutgoingMessage]) -> bool:
    """Whether no message has tags, keys, properties, a delay or a delivery time: such a
    send takes the lean path (one C call per message to tell)."""
    return list(map(_EXTRAS, messages)).count(_NO_EXTRAS) == len(messages)


def fingerprint(
    messages: Sequence[OutgoingMessage], delay_levels: Sequence[int], alone: bool | None = None
) -> Fingerprint:
    """What a repeat of a keyed send must match, made from the bodies' CRCs and the repr of
    their lengths and delay levels and the tags, keys and properties of each message that has
    any, in order. Where it goes (queue_id, sharding_key) is not part of it: a repeat is
    answered with where the first went. ``alone``: :func:`bodies_alone`, if known."""
    bodies = list(map(_BODY, messages))
    if bodies_alone(messages) if alone is None else alone:  # the value below, without the walk
        return bodies_fingerprint(bodies, delay_levels)
    described: tuple[object, ...] = (
        list(map(len, bodies)),
        list(delay_levels),
        [
            (number, m.tags, tuple(m.keys), sorted(m.properties.items()))
            for number, m in enumerate(messages)
            if m.tags is not None or m.keys or m.properties
        ],
    )
    timers = [(m.deliver_at, m.deliver_after_ms) for m in messages]
    if any(at is not None or after is not None for at, after in timers):
        described = (*described, timers)  # untimed sends keep the fingerprint they had
    return _made(bodies, body_crcs(bodies), repr(described))


def one_fingerprint(message: OutgoingMessage, delay_level: int) -> Fingerprint:
    """:func:`fingerprint` of a send of one message: for a body alone (perhaps delayed) the
    same digest with its described part written out, as a keyed single send needs it, without
    the lists and walks of a batch."""
    if (
        message.tags is None
        and not message.keys
        and not message.properties
        and message.deliver_at is None
        and message.deliver_after_ms is None
    ):
        body = message.body
        described = f"([{len(body)!r}], [{delay_level!r}], [])"  # = repr(described)
        return _made([body], [body_crc(body)], described)
    return fingerprint([message], [delay_level])


def bodies_fingerprint(
    bodies: list[bytes], delay_levels: Sequence[int], crcs: list[int] | None = None
) -> Fingerprint:
    """:func:`fingerprint` of messages that are bodies alone, from their bodies (``crcs``:
    their :func:`~storage.record.layout.body_crcs`, if made)."""
    lengths = _ints_repr(list(map(len, bodies)), of_ints=True)
    described = f"({lengths}, {_ints_repr(list(delay_levels))}, [])"
    return _made(bodies, body_crcs(bodies) if crcs is None else crcs, described)


def earlier_form(bodies: list[bytes], described: str) -> str:
    """The fingerprint as versions before :data:`VERSION` made it: SHA-256 over the bodies,
    then ``described`` (128 bits, hex)."""
    digest = hashlib.sha256(b"".join(bodies))  # = one update per body
    digest.update(described.encode())
    return digest.hexdigest()[:32]


def _made(bodies: list[bytes], crcs: list[int], described: str) -> Fingerprint:
    digest = hashlib.sha256(described.encode())
    digest.update(struct.pack(f">{len(crcs)}I", *crcs))
    return Fingerprint(VERSION + digest.hexdigest()[:32], bodies, described)


def _ints_repr(values: list[int], *, of_ints: bool = False) -> str:
    """``repr(values)``; at once for a list of one int repeated (a batch's equal bodies, its
    zero delay levels), which ``repr`` would write number by number. ``of_ints``: the values
    are known to be ints (lengths), not bools (equal to 0 and 1, but written otherwise)."""
    if (
        values
        and values.count(values[0]) == len(values)
        and (of_ints or set(map(type, values)) == {int})
    ):
        return f"[{', '.join([repr(values[0])] * len(values))}]"
    return repr(values)
