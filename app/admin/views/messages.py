"""Messages: find by msg id, by key, by topic + time range, by topic + queue + offset; one
message's detail with its properties, body as text or hex, reconsume count, each group's
consumption of it, and its retry and dead-letter copies."""

from __future__ import annotations

import time
from typing import Final
from urllib.parse import urlencode

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin import browse
from app.admin.forms import Form, FormError
from app.admin.problems import AdminRoute
from app.admin.rendering import PREFIX, redirect, render
from app.deps import BrokerDep
from services import (
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REDRIVEN_FROM,
    PROPERTY_RETRY_TOPIC,
    Broker,
    compiled_filter,
)
from services.errors import InvalidFilterError

router = APIRouter(route_class=AdminRoute)

MODES: Final = ("id", "key", "time", "offset")
PAGE: Final = 50
CURSORS: Final = ("after", "before")
"""Query parameters only a next-page link sets (where the page starts)."""
LINKED_PROPERTIES: Final = frozenset({PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_REDRIVEN_FROM})
"""Properties whose value is another message's id: shown as links."""


def _search(broker: Broker, mode: str, query: Form) -> browse.Found | None:
    limit = min(max(query.integer("limit", "Most results", PAGE), 1), browse.MAX_RESULTS)
    if mode == "key":
        topic, key = query.required("topic", "Topic"), query.required("key", "Key")
        begin, end = query.timestamp("begin", "From"), query.timestamp("end", "To")
        before = query.text("before")
        older_than = browse.KeyPosition.parse(before) if before else None
        return browse.by_key(broker, topic, key, (begin or 0, end), limit, older_than)
    if mode == "time":
        topic = query.required("topic", "Topic")
        now = int(time.time() * 1000)
        end = query.timestamp("end", "To") or now
        begin = query.timestamp("begin", "From") or end - 3600_000
        if begin > end:
            raise FormError("begin", "“From” is after “To”")
        after = query.text("after")
        later_than = browse.TimePosition.parse(after) if after else None
        found = browse.by_time(broker, topic, begin, end, limit, later_than)
        if found.next is not None:  # the next page covers the same range, later or not
            found.next.update(begin=str(begin), end=str(end))
        return found
    if mode == "offset":
        topic = query.required("topic", "Topic")
        queue_id = query.integer("queue_id", "Queue")
        offset = query.integer("offset", "Offset")
        return browse.by_offset(broker, topic, queue_id, offset, limit)
    return None


@router.get("/messages", name="admin-messages")
async def search_messages(request: Request, broker: BrokerDep) -> Response:
    query = Form.query(request.query_params)
    mode = query.text("mode", "key")
    if mode not in MODES:
        raise FormError("mode", f"search by one of {', '.join(MODES)}, not {mode!r}")
    if mode == "id" and query.text("msg_id"):
        message = broker.messages.by_id(query.text("msg_id"))
        return redirect(request, f"{PREFIX}/messages/{message.msg_id}")
    found = _search(broker, mode, query) if query.text("topic") else None
    if found is not None and query.text("filter"):
        _keep_matching(found, query.text("filter"))
    context = {
        "title": "Messages",
        "nav": "messages",
        "mode": mode,
        "q": query,
        "found": found,
        "next_url": _page_url(request, found.next) if found and found.next else "",
        "first_url": _page_url(request, {}) if _is_later_page(request) else "",
        "topics": sorted(c.topic_name for c in broker.topics.all()),
    }
    return render(request, "messages.html", context, fragment="_message_results.html")


def _keep_matching(found: browse.Found, expression: str) -> None:
    """Only the messages of the page that pass the SQL92 filter ``expression``; the page's
    next link still follows every message, so no later match is skipped."""
    try:
        sql = compiled_filter(expression)
    except InvalidFilterError as exc:
        raise FormError("filter", str(exc)) from None
    shown = len(found.messages)
    found.messages = [m for m in found.messages if sql.matches(m.properties)]
    found.notes.append(f"{len(found.messages)} of the {shown} messages searched match the filter")


def _page_url(request: Request, changes: dict[str, str]) -> str:
    """This search with ``changes`` to its parameters (and no page cursor but theirs)."""
    params = {k: v for k, v in request.query_params.items() if k not in CURSORS}
    return f"{PREFIX}/messages?{urlencode({**params, **changes})}"


def _is_later_page(request: Request) -> bool:
    return any(request.query_params.get(name) for name in CURSORS)


@router.get("/messages/{msg_id}", name="admin-message")
async def show_message(request: Request, msg_id: str, broker: BrokerDep) -> Response:
    message = broker.messages.by_id(msg_id)
    text = browse.body_text(message.body)
    view = Form.query(request.query_params).text("view", "text" if text is not None else "hex")
    groups = browse.consumption(broker, message)
    context = {
        "title": f"Message {message.msg_id}",
        "nav": "messages",
        "message": message,
        "text": text if text is None else text[: browse.TEXT_LIMIT],
        "text_truncated": text is not None and len(text) > browse.TEXT_LIMIT,
        "view": view,
        "hex": browse.hex_dump(message.body) if view == "hex" else "",
        "hex_truncated": len(message.body) > browse.HEX_LIMIT,
        "groups": groups,
        "copies": browse.copies(broker, message, [g.group for g in groups]),
        "original_topic": message.properties.get(PROPERTY_RETRY_TOPIC),
        "linked": LINKED_PROPERTIES,
    }
    return render(request, "message.html", context, fragment="_message_body.html")


@router.get("/messages/{msg_id}/body", name="admin-message-body")
async def download_body(msg_id: str, broker: BrokerDep) -> Response:
    """The whole body, as a file (the page shows at most the first 64 KiB)."""
    message = broker.messages.by_id(msg_id)
    disposition = f'attachment; filename="{message.msg_id}.bin"'
    return Response(
        message.body,
        media_type="application/octet-stream",
        headers={"Content-Disposition": disposition},
    )
