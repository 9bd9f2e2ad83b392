"""The ``Idempotency-Key`` request header of a send and its ``Idempotent-Replayed`` answer.

The key is 1 to 128 printable ASCII characters (``!`` to ``~``, no spaces), sent bare
(``Idempotency-Key: order-42-paid``) or as the IETF draft's Structured Field string
(``Idempotency-Key: "order-42-paid"``, with ``\\"`` and ``\\\\`` escapes): both name the same
key. The rule itself is the services' (:func:`services.idempotency.check_key`).
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import Request

from app.errors import ApiError
from services import KEY_PATTERN, MAX_KEY_LENGTH, check_key

REPLAYED_HEADERS: Final = {"Idempotent-Replayed": "true"}
_HEADER: Final = b"idempotency-key"
_SEVERAL: Final = "give one Idempotency-Key header, not several"

IDEMPOTENCY_KEY_PARAMETER: Final[dict[str, Any]] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        f"Makes the send safe to retry: 1 to {MAX_KEY_LENGTH} printable ASCII characters "
        "(`!` to `~`, no spaces), bare or as a quoted Structured Field string. A repeat with "
        "the same key and the same payload (bodies, tags, keys, properties, delay) within the "
        "server's window (`--dedup-window-s`, 300 s by default, by store time) answers the "
        "first send's receipts with `Idempotent-Replayed: true` and stores nothing; the same "
        "key with another payload is 422 IDEMPOTENCY_KEY_REUSED. A repeat that arrives while "
        "the first is still being written waits for it and answers the same receipts. Keys "
        "are per topic; a batch has one key for all its messages. Without queue_id or "
        "sharding_key a keyed send goes to the queue its key hashes to, so a retry finds it. "
        "Outside the window a key is new again."
    ),
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_KEY_LENGTH,
        "pattern": KEY_PATTERN,
    },
    "example": "order-42-paid",
}

REPLAYED_RESPONSE_HEADER: Final[dict[str, Any]] = {
    "Idempotent-Replayed": {
        "description": (
            "`true` when the receipts are those of an earlier send with the same "
            "Idempotency-Key (nothing was stored this time); absent otherwise."
        ),
        "schema": {"type": "string", "enum": ["true"]},
    }
}


EPOCH_RESPONSE_HEADER: Final[dict[str, Any]] = {
    "Spoolmq-Epoch": {
        "description": (
            "The epoch of the master that stored the messages (an elected master's term in "
            "its broker group; see GET /v1/replication)."
        ),
        "schema": {"type": "string", "pattern": "^[0-9]+$"},
    }
}

SEND_RESPONSES: Final[dict[int | str, dict[str, Any]]] = {
    201: {"headers": {**REPLAYED_RESPONSE_HEADER, **EPOCH_RESPONSE_HEADER}}
}
"""A send's documented answer: the 201's Idempotent-Replayed and Spoolmq-Epoch headers."""


def idempotency_key(request: Request) -> str | None:
    """The request's Idempotency-Key, checked; None without one. 400 INVALID_IDEMPOTENCY_KEY
    for a malformed key or more than one.

    Read from the scope's raw headers (lower-case names, as ``request.headers`` compares
    them) in one loop: every send asks, and ``getlist`` builds a list in a comprehension."""
    found: bytes | None = None
    for name, value in request.scope["headers"]:
        if name == _HEADER:
            if found is not None:
                raise ApiError("INVALID_IDEMPOTENCY_KEY", _SEVERAL)
            found = value
    return None if found is None else _key_in(found.decode("latin-1"))


def key_of(values: list[str]) -> str | None:
    """:func:`idempotency_key` of the Idempotency-Key headers' values (decoded as latin-1)."""
    if not values:
        return None
    if len(values) > 1:
        raise ApiError("INVALID_IDEMPOTENCY_KEY", _SEVERAL)
    return _key_in(values[0])


def _key_in(value: str) -> str:
    """The key one header value gives, bare or quoted, checked."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = _unquote(value)
    return check_key(value)


def _unquote(value: str) -> str:
    """The text of a Structured Field string (RFC 8941 §3.3.3): ``\\"`` and ``\\\\`` escapes."""
    text = []
    chars = iter(value[1:-1])
    for char in chars:
        if char == "\\":
            char = next(chars, "")
            if char not in ('"', "\\"):
                raise ApiError(
                    "INVALID_IDEMPOTENCY_KEY",
                    'a quoted Idempotency-Key escapes only \\" and \\\\',
                )
        elif char == '"':
            raise ApiError("INVALID_IDEMPOTENCY_KEY", 'a quoted Idempotency-Key has a bare "')
        text.append(char)
    return "".join(text)


__all__ = [
    "IDEMPOTENCY_KEY_PARAMETER",
    "REPLAYED_HEADERS",
    "REPLAYED_RESPONSE_HEADER",
    "SEND_RESPONSES",
    "idempotency_key",
]
