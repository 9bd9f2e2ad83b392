"""Which requests are writes (answered 421 by a slave)."""

from __future__ import annotations

from typing import Any

import pytest

from app.replica_guard import is_write


def scope(method: str, path: str, query: bytes = b"") -> dict[str, Any]:
    return {"method": method, "path": path, "query_string": query}


@pytest.mark.parametrize(
    ("method", "path", "query", "write"),
    [
        ("POST", "/v1/topics/t/messages", b"", True),
        ("PUT", "/v1/groups/g", b"", True),
        ("DELETE", "/v1/groups/g", b"", True),
        ("GET", "/v1/topics/t/queues/0/messages", b"", False),
        ("GET", "/v1/groups/g/topics/t/messages", b"", False),
        ("GET", "/v1/groups/g/topics/t/messages", b"max=3&auto_commit=true", True),
        ("GET", "/v1/groups/g/topics/t/messages", b"auto_commit=1", True),
        ("GET", "/v1/groups/g/topics/t/messages", b"auto_commit=false", False),
        ("HEAD", "/v1/topics", b"", False),
        ("POST", "/admin/topics", b"", True),
        ("POST", "/admin/login", b"", False),
        ("POST", "/admin/logout", b"", False),
        ("POST", "/admin/groups/g/reset/preview", b"", False),
        ("POST", "/healthz", b"", False),  # outside /v1 and /admin: no state of the broker
    ],
)
def test_is_write(method: str, path: str, query: bytes, write: bool) -> None:
    assert is_write(scope(method, path, query)) is write
