"""OrjsonResponse builds the status, body and headers Starlette's ``Response`` builds for the
same JSON (its constant headers precomputed), with or without extra headers."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from starlette.background import BackgroundTask
from starlette.responses import Response

from app.responses import OrjsonResponse


def _starlette(content: Any, status: int, **kwargs: Any) -> Response:
    kwargs.setdefault("media_type", "application/json")
    return Response(orjson.dumps(content), status, **kwargs)


@pytest.mark.parametrize("status", [100, 200, 201, 204, 304, 404, 500])
@pytest.mark.parametrize("content", [None, {"a": [1, "é"]}, [], "text"])
def test_the_headers_are_starlettes(content: Any, status: int) -> None:
    ours, theirs = OrjsonResponse(content, status), _starlette(content, status)
    assert (ours.status_code, ours.body, ours.raw_headers, ours.background) == (
        theirs.status_code,
        theirs.body,
        theirs.raw_headers,
        theirs.background,
    )
    assert ours.headers["content-type"] == "application/json"


def test_extra_headers_media_type_and_background_go_starlettes_way() -> None:
    task = BackgroundTask(print)
    for kwargs in (
        {"headers": {"X-Replayed": "true"}},
        {"media_type": "application/problem+json"},
        {"background": task},
    ):
        ours = OrjsonResponse({"k": 1}, 201, **kwargs)
        theirs = _starlette({"k": 1}, 201, **kwargs)
        assert (ours.body, ours.raw_headers, ours.background) == (
            theirs.body,
            theirs.raw_headers,
            theirs.background,
        )


def test_each_answer_has_its_own_header_list() -> None:
    first, second = OrjsonResponse({}), OrjsonResponse({})
    first.raw_headers.append((b"x-request-id", b"1"))
    assert (b"x-request-id", b"1") not in second.raw_headers
