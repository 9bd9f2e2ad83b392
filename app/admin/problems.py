"""Domain errors as readable messages on the admin pages.

The services and the store raise errors with a stable ``code`` and a full-sentence message
(the same ones ``/v1`` returns as problem+json). The pages keep both and add a short
heading per code; the status comes from the one table in :mod:`app.errors`.
:class:`AdminRoute` catches them for every admin view, so views just call the services.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from app.admin.forms import FormError
from app.admin.rendering import render
from app.problem_codes import STATUS_BY_CODE
from services.errors import ServiceError, StorageError

HEADINGS: Final[dict[str, str]] = {
    "TOPIC_NOT_FOUND": "No such topic",
    "GROUP_NOT_FOUND": "No such consumer group",
    "QUEUE_NOT_FOUND": "No such queue",
    "MESSAGE_NOT_FOUND": "Message not found",
    "NOT_FOUND": "Not found",
    "INVALID_TOPIC_NAME": "Invalid topic name",
    "INVALID_GROUP_NAME": "Invalid group name",
    "INVALID_MESSAGE_ID": "Invalid message id",
    "INVALID_OFFSET": "Offset out of range",
    "INVALID_PROPERTY": "Invalid tag, key or property",
    "INVALID_TOPIC_CONFIG": "Invalid topic settings",
    "INVALID_REQUEST": "Invalid request",
    "BATCH_REJECTED": "Messages rejected",
    "MESSAGE_ILLEGAL": "Invalid message",
    "MESSAGE_TOO_LARGE": "Message too large",
    "PROPERTIES_TOO_LARGE": "Properties too large",
    "SYSTEM_TOPIC": "System topic",
    "TOPIC_NOT_WRITEABLE": "Topic is not writeable",
    "TOPIC_NOT_READABLE": "Topic is not readable",
    "CONSUME_DISABLED": "Consuming is turned off",
    "FORBIDDEN": "Not allowed",
    "TOO_MANY_WAITERS": "Too busy",
    "BROKER_UNAVAILABLE": "Broker unavailable",
    "STORE_NOT_WRITEABLE": "The store refuses writes",
    "DISK_FULL": "The disk is full",
    "STORE_FLUSH_FAILED": "A flush to disk failed",
    "STORE_CLOSED": "The store is closed",
    "VALIDATION_FAILED": "Please check the form",
    "STALE_PREVIEW": "The offsets moved since the preview",
    "TIMER_ALREADY_DELIVERED": "Already delivered",
    "TIMER_NOT_FOUND": "No such timer message",
    "INVALID_TIMER_HANDLE": "Invalid timer handle",
}
"""A short heading per stable code; the error's own message follows it."""

AdminError = ServiceError | StorageError | FormError


@dataclass(frozen=True, slots=True)
class Problem:
    """What the page shows for one error."""

    heading: str
    code: str
    detail: str
    status: int
    field: str = ""  # the form field at fault, when known


def problem_of(exc: AdminError) -> Problem:
    code = exc.code
    heading = HEADINGS.get(code) or code.replace("_", " ").capitalize()
    field = exc.field if isinstance(exc, FormError) else ""
    return Problem(heading, code, str(exc), STATUS_BY_CODE.get(code, 500), field)


def render_problem(request: Request, exc: AdminError) -> Response:
    """An error box (htmx swaps it where the result would go) or an error page."""
    problem = problem_of(exc)
    return render(
        request,
        "problem.html",
        {"problem": problem, "title": problem.heading},
        fragment="_problem.html",
        status=problem.status,
    )


class AdminRoute(APIRoute):
    """An admin route: domain and form errors become HTML instead of problem+json."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except (ServiceError, StorageError, FormError) as exc:
                return render_problem(request, exc)

        return handle
