"""Response helpers: orjson rendering and the documented problem responses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
from starlette.background import BackgroundTask
from starlette.responses import Response

from app.errors import PROBLEM_MEDIA_TYPE


class BytesResponse(Response):
    """A Starlette Response of a body already in bytes, its raw headers built directly — the
    same list, in the same order, that Starlette's ``init_headers`` builds (given headers, then
    Content-Length unless given or the status has no body, then Content-Type with a text
    type's charset unless given), without its general machinery, which cost the busiest
    routes more than their routing."""

    def __init__(
        self,
        content: bytes,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        self.status_code = status_code
        if media_type is not None:
            self.media_type = media_type
        self.background = background
        self.body = content
        raw: list[tuple[bytes, bytes]] = []
        length = kind = True
        if headers:
            for name, value in headers.items():
                key = name.lower().encode("latin-1")
                raw.append((key, value.encode("latin-1")))
                if key == b"content-length":
                    length = False
                elif key == b"content-type":
                    kind = False
        if length and status_code >= 200 and status_code != 204 and status_code != 304:
            raw.append((b"content-length", b"%d" % len(content)))
        if kind and self.media_type is not None:
            raw.append((b"content-type", _content_type(self.media_type)))
        self.raw_headers = raw


_CONTENT_TYPES: dict[str, bytes] = {}


def _content_type(media_type: str) -> bytes:
    """A Content-Type header's value as Starlette writes it (a text type gets a charset)."""
    value = _CONTENT_TYPES.get(media_type)
    if value is None:
        text = media_type
        if text.startswith("text/") and "charset=" not in text.lower():
            text += "; charset=" + Response.charset
        value = text.encode("latin-1")
        if len(_CONTENT_TYPES) < 256:  # brokers name a handful; anything else is not kept
            _CONTENT_TYPES[media_type] = value
    return value


class OrjsonResponse(BytesResponse):
    """JSON rendered by orjson (the busiest routes build plain dicts and skip model
    validation)."""

    media_type = "application/json"

    def __init__(
        self,
        content: Any = None,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        super().__init__(orjson.dumps(content), status_code, headers, media_type, background)

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


PROBLEM_SCHEMA_REF: Final = {"$ref": "#/components/schemas/Problem"}

_DESCRIPTIONS: Final = {
    400: "Bad request: malformed JSON, or an invalid topic, group or message id "
    "(codes MALFORMED_JSON, INVALID_TOPIC_NAME, INVALID_GROUP_NAME, INVALID_MESSAGE_ID, ...).",
    403: "Not allowed: a system topic, a topic without the read or write perm, or a group "
    "with consuming turned off.",
    404: "Not found: topic, group, queue or message (TOPIC_NOT_FOUND, GROUP_NOT_FOUND, "
    "QUEUE_NOT_FOUND, MESSAGE_NOT_FOUND).",
    409: "Conflict: the group consumes the other way (CONSUME_MODE_CONFLICT: offsets vs "
    "receive/ack), or the receipt handle's invisibility ran out (RECEIPT_HANDLE_EXPIRED).",
    413: "Too large: the request body is over the limit (4 MiB by default; refused before it "
    "is read) or a message is over the store's maximum size.",
    422: "Validation failed: a parameter or field has the wrong type or is out of bounds "
    "(VALIDATION_FAILED, with `errors`), or a domain check failed (INVALID_OFFSET, ...).",
    429: "Too many parked long-polls (TOO_MANY_WAITERS); retry after `Retry-After` seconds.",
    501: "The broker cannot do this as configured: an Idempotency-Key on a broker without "
    "the message index (IDEMPOTENCY_UNAVAILABLE).",
    503: "The broker is starting or stopping, or the store refuses writes; retry after "
    "`Retry-After` seconds.",
}

_RETRY_AFTER: Final = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer"},
    }
}


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for these statuses, as application/problem+json."""
    responses: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "description": _DESCRIPTIONS[status],
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_SCHEMA_REF}},
        }
        if status in (429, 503):
            entry["headers"] = _RETRY_AFTER
        responses[status] = entry
    return responses
