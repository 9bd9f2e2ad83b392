"""Forwarding to brokers over one shared ``httpx.AsyncClient``, and the proxy's own errors.

A broker's answer (2xx or 4xx) comes back as :class:`BrokerAnswer`; a broker that does not
answer is :class:`BrokerUnreachableError`, which the proxy turns into 503 + Retry-After.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from starlette.responses import Response

from app.errors import PROBLEM_MEDIA_TYPE, ApiError
from services.cluster import BrokerMember

RETRY_AFTER_S = 1
FORWARDED_HEADERS = ("content-type", "authorization", "x-request-id")


class ProxyError(ApiError):
    """An answer the proxy gives itself: a problem+json whose status its code decides."""


class BrokerUnreachableError(ProxyError):
    """No answer from a broker (refused, reset, timed out)."""

    def __init__(self, member: BrokerMember, reason: str) -> None:
        super().__init__(
            "BROKER_UNAVAILABLE",
            f"broker {member.name} of group {member.group} does not answer: {reason}",
            {"Retry-After": str(RETRY_AFTER_S)},
        )
        self.member = member


@dataclass
class BrokerAnswer:
    """A broker's HTTP answer, kept to pass on or to rewrite."""

    status: int
    content: bytes
    content_type: str
    headers: dict[str, str]

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return orjson.loads(self.content)

    def response(self) -> Response:
        """Pass the answer on unchanged."""
        return Response(self.content, self.status, self.headers, media_type=self.content_type)

    def with_body(self, body: Any) -> Response:
        """Pass the answer on with a rewritten JSON body."""
        return Response(orjson.dumps(body), self.status, self.headers, self.content_type)


_KEPT_RESPONSE_HEADERS = ("retry-after", "location")


class Forwarder:
    """Sends one request to one broker member."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def call(
        self,
        member: BrokerMember,
        method: str,
        path: str,
        *,
        params: Sequence[tuple[str, str]] | None = None,
        json: Any = None,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> BrokerAnswer:
        sent_headers = {k: v for k, v in (headers or {}).items() if k in FORWARDED_HEADERS}
        if json is not None:
            content = orjson.dumps(json)
            sent_headers["content-type"] = "application/json"
        try:
            answer = await self.client.request(
                method,
                member.http_url.rstrip("/") + path,
                params=list(params or ()),
                content=content,
                headers=sent_headers,
            )
        except httpx.TransportError as exc:
            raise BrokerUnreachableError(member, type(exc).__name__) from None
        kept = {k: v for k, v in answer.headers.items() if k.lower() in _KEPT_RESPONSE_HEADERS}
        content_type = answer.headers.get("content-type", "application/json")
        return BrokerAnswer(answer.status_code, answer.content, content_type, kept)

    async def call_any(
        self, members: Sequence[BrokerMember], method: str, path: str, **kwargs: Any
    ) -> tuple[BrokerMember, BrokerAnswer]:
        """Try members in turn (a read: master first, then slaves) until one answers."""
        last: BrokerUnreachableError | None = None
        for member in members:
            try:
                return member, await self.call(member, method, path, **kwargs)
            except BrokerUnreachableError as exc:
                last = exc
        if last is not None:
            raise last
        raise ProxyError(
            "BROKER_UNAVAILABLE", "no replica is known", {"Retry-After": str(RETRY_AFTER_S)}
        )


def is_problem(answer: BrokerAnswer) -> bool:
    return answer.content_type.startswith(PROBLEM_MEDIA_TYPE)
