"""Reading spoolmq's error answers (``application/problem+json``) for messages to users."""

from __future__ import annotations

import httpx


def problem_code(response: httpx.Response) -> str | None:
    """The stable ``code`` of a problem+json answer, if it has one."""
    try:
        body = response.json()
    except ValueError:
        return None
    return str(body["code"]) if isinstance(body, dict) and body.get("code") else None


def problem_text(response: httpx.Response) -> str:
    """``CODE: detail`` of a problem+json answer (its title when it has no detail), or the
    start of the body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(body, dict):
        parts = [str(body[k]) for k in ("code", "title", "detail") if body.get(k)]
        if parts:
            return ": ".join(parts)
    return response.text[:300]
