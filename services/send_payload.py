"""What a send holds besides where it goes: whether its messages are bodies alone (the lean
paths), and the fingerprint a repeat of a keyed send must match (:mod:`services.idempotency`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from operator import attrgetter
from typing import Final

from services.outgoing import NO_PROPERTIES, OutgoingMessage

_EXTRAS: Final = attrgetter(
    "tags", "keys", "properties", "delay_level", "deliver_after_ms", "deliver_at"
)
_NO_EXTRAS: Final = (None, (), NO_PROPERTIES, 0, None, None)
"""What a message sends besides its body and where it goes, and that of a body alone."""
_BODY: Final = attrgetter("body")


def bodies_alone(messages: Sequence[OutgoingMessage]) -> bool:
    """Whether no message has tags, keys, properties, a delay or a delivery time: such a
    send takes the lean path (one C call per message to tell)."""
    return list(map(_EXTRAS, messages)).count(_NO_EXTRAS) == len(messages)


def fingerprint(
    messages: Sequence[OutgoingMessage], delay_levels: Sequence[int], alone: bool | None = None
) -> str:
    """What a repeat of a keyed send must match: SHA-256 (128 bits, hex) over the bodies, then
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
    return _digest(bodies, described)


def one_fingerprint(message: OutgoingMessage, delay_level: int) -> str:
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
        digest = hashlib.sha256(body)
        digest.update(f"([{len(body)!r}], [{delay_level!r}], [])".encode())  # = repr(described)
        return digest.hexdigest()[:32]
    return fingerprint([message], [delay_level])


def bodies_fingerprint(bodies: list[bytes], delay_levels: Sequence[int]) -> str:
    """:func:`fingerprint` of messages that are bodies alone, from their bodies."""
    lengths = _ints_repr(list(map(len, bodies)), of_ints=True)
    described = f"({lengths}, {_ints_repr(list(delay_levels))}, [])"
    return _hex_digest(bodies, described)  # = _digest(bodies, (lengths, levels, []))


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


def _digest(bodies: list[bytes], described: tuple[object, ...]) -> str:
    return _hex_digest(bodies, repr(described))


def _hex_digest(bodies: list[bytes], described: str) -> str:
    digest = hashlib.sha256(b"".join(bodies))  # = one update per body
    digest.update(described.encode())
    return digest.hexdigest()[:32]
