"""What the proxy reads of the bodies it forwards, and how it rewrites them: no more than
routing needs.

A send names its cluster-wide queue (or sharding key) inside its JSON, and the broker must get
the group's local queue id instead. Decoding a 100-message batch and encoding it again for
that would cost more than the rest of the proxy's work on it, so a send whose bytes hold
neither ``_`` nor ``\\`` — which cannot name ``queue_id`` or ``sharding_key``, not even with
escapes — is forwarded as it came, with the local ``queue_id`` put in front; any other body
is decoded, checked and encoded again.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from app.errors import ApiError
from services.cluster import batch_queue_id, batch_sharding_key, localize_send


def json_body(raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        raise ApiError("MALFORMED_JSON", "the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError("VALIDATION_FAILED", "the request body is a JSON object")
    return data


def checked_body(model: type[BaseModel], raw: bytes) -> dict[str, Any]:
    """A JSON body the proxy passes on, checked first with the broker's own model as FastAPI
    checks a declared body (a missing one included: RequestValidationError, located in the
    body); the body as it came, decoded."""
    if not raw.strip():
        missing = {"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}
        raise RequestValidationError([missing])
    body = json_body(raw)
    try:
        model.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
    return body


class JsonSend:
    """A JSON send (one message or a batch): where it asks to go, and its body for a group."""

    __slots__ = ("decoded", "queue_id", "raw", "sharding_key")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw.lstrip()
        self.decoded: dict[str, Any] | None = None
        self.queue_id: int | None = None
        self.sharding_key: str | None = None
        # find, not `in`: `bytes in bytes` tries its operand as an int first (a TypeError)
        if self.raw[:1] == b"{" and raw.find(b"_") < 0 and raw.find(b"\\") < 0:
            return  # names no queue and no sharding key: forwarded undecoded
        self.decoded = json_body(raw)
        self.queue_id = batch_queue_id(self.decoded)
        self.sharding_key = batch_sharding_key(self.decoded)

    def for_queue(self, local_queue_id: int) -> bytes:
        """The body to send to the group that hosts the chosen queue."""
        return b"".join(self.parts_for(local_queue_id))

    def parts_for(self, local_queue_id: int) -> tuple[bytes | memoryview, ...]:
        """:meth:`for_queue` as buffers to write one after the other: an undecoded body is
        not copied (a 100 KB batch was copied twice, by a slice and by a format)."""
        if self.decoded is not None:
            try:
                return (orjson.dumps(localize_send(self.decoded, local_queue_id)),)
            except orjson.JSONEncodeError as exc:  # orjson writes fewer levels than it reads
                raise ApiError(
                    "VALIDATION_FAILED", f"the request body cannot be passed on: {exc}"
                ) from None
        first = _FIRST_MEMBER.match(self.raw, 1)
        comma = b"" if first is not None and first.group(1) == b"}" else b","
        return (b'{"queue_id":%d%s' % (local_queue_id, comma), memoryview(self.raw)[1:])


_FIRST_MEMBER = re.compile(rb"\s*(.)", re.DOTALL)
"""What follows an object's ``{``: its first member's quote, or ``}``."""
