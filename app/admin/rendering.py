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
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from fastapi.templating import Jinja2Templates
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from services import format_duration

TEMPLATES_DIR: Final = Path(__file__).resolve().parent / "templates"
STATIC_DIR: Final = Path(__file__).resolve().parent / "static"

PREFIX: Final = "/admin"


def _base(request: Request) -> dict[str, Any]:
    """``base``: where the admin pages live (links and static files start there)."""
    return {"base": request.scope.get("root_path", "") + PREFIX}


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


def format_bytes(value: int) -> str:
    """Bytes in binary units: ``1.5 MiB``."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def datetime_input(value: int | None) -> str:
    """A ms timestamp as the value of a ``datetime-local`` input (UTC, seconds precision)."""
    if value is None:
        return ""
    moment = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def path_segment(value: object) -> str:
    """A name as one URL path segment (``%RETRY%g`` → ``%25RETRY%25g``)."""
    return quote(str(value), safe="")


def body_preview(body: bytes, length: int = 120) -> str:
    """The start of a body as text, or a note that it is binary."""
    head = body[: length * 4]
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:  # not final when cut: a character split at the cut is left out, not an error
        text = decoder.decode(head, final=len(head) == len(body))
    except UnicodeDecodeError:
        return f"(binary, {len(body)} B)"
    return text[:length] + ("…" if len(text) > length or len(head) < len(body) else "")


templates.env.globals["csrf_token"] = ""
templates.env.filters["preview"] = body_preview
templates.env.filters["seg"] = path_segment
templates.env.filters["ts"] = format_ms
templates.env.filters["bytes"] = format_bytes
templates.env.filters["duration"] = format_duration  # one format with the Spark reports
templates.env.filters["datetime_input"] = datetime_input


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
