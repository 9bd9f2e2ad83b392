"""Response helpers: orjson rendering and the documented problem responses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson
from starlette.background import BackgroundTask
from starlette.responses import Response

from app.errors import PROBLEM_MEDIA_TYPE


class OrjsonResponse(Response):
    """JSON rendered by orjson (the busiest routes build plain dicts and skip model validation).

    Without extra headers, media type or background task, the headers are built here from
    constant bytes: what ``Response.init_headers`` builds for them, without its checks."""

    media_type = "application/json"

    def __init__(
        self,
        content: Any = None,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        if headers is not None or media_type is not None or background is not None:
            super().__init__(content, status_code, headers, media_type, background)
            return
        self.status_code = status_code
        self.background = None
        body = self.body = orjson.dumps(content)
        if status_code < 200 or status_code in (204, 304):
            self.raw_headers = [_JSON_TYPE]
        else:
            self.raw_headers = [(b"content-length", b"%d" % len(body)), _JSON_TYPE]

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


_JSON_TYPE: Final = (b"content-type", OrjsonResponse.media_type.encode("latin-1"))


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
