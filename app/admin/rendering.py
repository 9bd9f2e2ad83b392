"""Templates and the two ways an admin view answers: a whole page, or an htmx fragment.

A request htmx sends carries ``HX-Request: true`` and wants only the part of the page it
swaps; a plain browser request (a bookmark, a reload, a form without JavaScript) wants the
whole page. Views name both templates and :func:`render` picks one.

Template globals the security layer may replace: ``csrf_token`` (a string, or a callable
returning one) is written into a hidden field of every form that changes state.
"""

from __future__ import annotations

import codecs
import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from fastapi.templating import Jinja2Templates
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from services import RESERVED_PROPERTIES, format_duration

TEMPLATES_DIR: Final = Path(__file__).resolve().parent / "templates"
STATIC_DIR: Final = Path(__file__).resolve().parent / "static"

PREFIX: Final = "/admin"


def _base(request: Request) -> dict[str, Any]:
    """``base``: where the admin pages live (links and static files start there); ``root``:
    where the server's own paths start (the API docs, the icon)."""
    root = request.scope.get("root_path", "")
    return {"base": root + PREFIX, "root": root}


def _store_refusal(request: Request) -> dict[str, Any]:
    """``store_refusal``: why the store refuses writes ("" while it accepts them), for the
    banner on every page (a full disk, a failed fsync, a stalled dispatch)."""
    broker = getattr(request.app.state, "broker", None)
    if broker is None or not broker.running:
        return {"store_refusal": ""}
    gauges = broker.store_gauges()
    return {"store_refusal": "" if gauges.writeable else gauges.not_writeable_reason}


templates = Jinja2Templates(directory=TEMPLATES_DIR, context_processors=[_base, _store_refusal])
"""The admin pages' templates; ``templates.env.globals`` holds ``csrf_token``."""


def format_ms(value: int | None) -> str:
    """A ms timestamp as ``2026-11-21 06:11:16.123`` (UTC); ``—`` for 0 or unknown."""
    if not value or value < 0:
        return "—"
    moment = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{value % 1000:03d}"


def iso_ms(value: int) -> str:
    """A ms timestamp in ISO 8601 with ms, UTC (``2026-12-05T09:30:00.000Z``): the
    ``datetime`` of a ``<time>`` element."""
    moment = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value % 1000:03d}Z"


def format_bytes(value: int) -> str:
    """Bytes in binary units: ``1.5 MiB``."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def datetime_input(value: int | None) -> str:
    """A ms timestamp as the value of a ``datetime-local`` input (UTC; ms when not 0)."""
    if value is None:
        return ""
    moment = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    ms = value % 1000
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{ms:03d}" if ms else "")


def datetime_field(value: str) -> str:
    """A time as a form field holds it, for a ``datetime-local`` input: ms since the epoch
    (what a page link carries) as a UTC date and time, anything else as it was typed."""
    return datetime_input(int(value)) if value.isdigit() else value


def path_segment(value: object) -> str:
    """A name as one URL path segment (``%RETRY%g`` → ``%25RETRY%25g``)."""
    return quote(str(value), safe="")


PREVIEW_CHARS: Final = 120
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
"""Control characters no text body holds (tabs and line ends aside): such a body is binary."""


@dataclass(frozen=True, slots=True)
class BodyPreview:
    """The start of a body on one line, for a table row."""

    text: str | None  # None: the body is not text (not UTF-8, or holds control characters)
    size: int  # bytes of the whole body
    cut: bool  # the text is only the start of the body


def preview_of(body: bytes, length: int = PREVIEW_CHARS) -> BodyPreview:
    """The first ``length`` characters of a text body, white space runs (line ends, tabs)
    shown as one space and a cut made at a word's end when one is near."""
    head = body[: length * 4]
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:  # not final when cut: a character split at the cut is left out, not an error
        text = decoder.decode(head, final=len(head) == len(body))
    except UnicodeDecodeError:
        return BodyPreview(None, len(body), cut=False)
    if _CONTROL.search(text):
        return BodyPreview(None, len(body), cut=False)
    line = " ".join(text.split())
    if len(line) <= length:
        return BodyPreview(line, len(body), cut=len(head) < len(body))
    return BodyPreview(_cut_at_word(line, length), len(body), cut=True)


def _cut_at_word(line: str, length: int) -> str:
    """The first ``length`` characters, ending at the last space of their final third."""
    start = line[:length]
    space = start.rfind(" ")
    return start[:space] if space > length * 2 // 3 else start


def body_preview(body: bytes, length: int = PREVIEW_CHARS) -> str:
    """The start of a body as text, or a note that it is binary."""
    preview = preview_of(body, length)
    if preview.text is None:
        return f"(binary, {format_bytes(preview.size)})"
    return preview.text + ("…" if preview.cut else "")


def user_properties(properties: Mapping[str, str]) -> list[tuple[str, str]]:
    """The properties a producer gave, by name: without the tags, keys, UNIQ_KEY and the
    names the broker sets or interprets (retry topic, transaction, timer, ...)."""
    return sorted(
        (name, value)
        for name, value in properties.items()
        if name not in RESERVED_PROPERTIES and name != "UNIQ_KEY"
    )


templates.env.globals["csrf_token"] = ""
templates.env.filters["preview"] = body_preview
templates.env.filters["preview_of"] = preview_of
templates.env.filters["user_properties"] = user_properties
templates.env.filters["iso"] = iso_ms
templates.env.filters["seg"] = path_segment
templates.env.filters["ts"] = format_ms
templates.env.filters["bytes"] = format_bytes
templates.env.filters["duration"] = format_duration  # one format with the Spark reports
templates.env.filters["datetime_input"] = datetime_input
templates.env.filters["datetime_field"] = datetime_field


def is_htmx(request: Request) -> bool:
    """Whether htmx sent the request for a fragment (a history restore wants the page)."""
    headers = request.headers
    return (
        headers.get("hx-request") == "true" and headers.get("hx-history-restore-request") != "true"
    )


def render(
    request: Request,
    page: str,
    context: dict[str, Any],
    *,
    fragment: str | None = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    """``fragment`` for an htmx request when given, else the whole ``page``."""
    name = fragment if fragment is not None and is_htmx(request) else page
    return templates.TemplateResponse(request, name, context, status_code=status, headers=headers)


def redirect(request: Request, url: str) -> Response:
    """Go to ``url``: a 303 for a browser form, ``HX-Redirect`` for htmx (a full page load)."""
    if is_htmx(request):
        return Response(status_code=200, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)
