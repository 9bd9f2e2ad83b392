"""What a send holds besides where it goes: whether its messages are bodies alone
(:func:`plain`), and the fingerprint a repeat of a keyed send must match
(:mod:`services.idempotency`).

The fingerprint is stored in the first record of every keyed send, so what it is made of may
not change between versions without the older form still being matched:

- **now** (``2:`` and 32 hex digits): SHA-256 over the repr of the send's lengths, delay
  levels and extras (below), then each body's CRC (the record's BODYCRC, ``zlib.crc32`` masked
  to 31 bits, four bytes big-endian each). The uniform batch's encoder takes those CRCs as
  made for the fingerprint instead of computing them again, so a keyed batch hashes a few
  hundred bytes, not its bodies.
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
from storage.record.layout import body_crcs

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


def plain(messages: Sequence[OutgoingMessage]) -> bool:
    """Whether no message has tags, keys, properties, a delay or a delivery time: each is its
    body alone (told column by column: C calls only)."""
    if not messages:
        return True
    _, tags, keys, properties, _, _, levels, after, at = zip(*messages, strict=True)
    count = len(messages)
    return (
        tags.count(None) == count
        and keys.count(()) == count
        and properties.count(NO_PROPERTIES) == count
        and levels.count(0) == count
        and after.count(None) == count
        and at.count(None) == count
    )


def fingerprint(
    messages: Sequence[OutgoingMessage],
    delay_levels: Sequence[int],
    *,
    alone: bool | None = None,
    crcs: list[int] | None = None,
) -> Fingerprint:
    """What a repeat of a keyed send must match, made from the bodies' CRCs and the repr of
    their lengths and delay levels and the tags, keys and properties of each message that has
    any, in order. Where it goes (queue_id, sharding_key) is not part of it: a repeat is
    answered with where the first went. ``alone``: :func:`plain`, if known; ``crcs``: the
    bodies' :func:`~storage.record.layout.body_crcs`, if made."""
    bodies = list(map(_BODY, messages))
    if crcs is None:
        crcs = body_crcs(bodies)
    if plain(messages) if alone is None else alone:  # the repr below, written out at once
        lengths = _ints_repr(list(map(len, bodies)), of_ints=True)
        return _made(bodies, crcs, f"({lengths}, {_ints_repr(list(delay_levels))}, [])")
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
    return _made(bodies, crcs, repr(described))


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
