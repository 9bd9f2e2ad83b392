"""Responses of rendered bytes and of orjson-rendered JSON, built as Starlette builds them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from starlette.background import BackgroundTask
from starlette.responses import Response


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
        kind_of = self.media_type
        if kind and kind_of is not None:
            raw.append((b"content-type", _CONTENT_TYPES.get(kind_of) or _content_type(kind_of)))
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
