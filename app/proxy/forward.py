"""Forwarding to brokers over the proxy's keep-alive connections, and the proxy's own errors.

A broker's answer (2xx or 4xx) comes back as :class:`BrokerAnswer`; a broker that does not
answer is :class:`BrokerUnreachableError`, which the proxy turns into 503 + Retry-After.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

import orjson
from starlette.datastructures import Headers
from starlette.responses import Response

from app.errors import PROBLEM_MEDIA_TYPE, ApiError
from app.proxy.upstream import Origin, Upstream, UpstreamError
from services.cluster import BrokerMember

RETRY_AFTER_S = 1
FORWARDED_HEADERS: Final = frozenset((b"content-type", b"authorization", b"x-request-id"))
_KEPT_RESPONSE_HEADERS: Final = frozenset((b"retry-after", b"location"))
BROKER_TIMEOUT_S = 40.0
"""Long enough for a broker's longest long-poll; a connect failure is still quick."""


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


@dataclass(slots=True)
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

    def response(self, content: bytes | None = None) -> Response:
        """Pass the answer on, unchanged or with ``content`` (rewritten) as its body."""
        body = self.content if content is None else content
        return Response(body, self.status, self.headers, media_type=self.content_type)

    def with_body(self, body: Any) -> Response:
        """Pass the answer on with a rewritten JSON body."""
        return Response(orjson.dumps(body), self.status, self.headers, self.content_type)


def broker_path(*segments: str | int) -> str:
    """``/v1/…`` from path segments, each percent-encoded (a topic may hold ``%``)."""
    return "".join("/" + quote(str(s), safe="") for s in segments)


class Forwarder:
    """Sends one request to one broker member."""

    def __init__(self, upstream: Upstream, timeout_s: float = BROKER_TIMEOUT_S) -> None:
        self.upstream = upstream
        self.timeout_s = timeout_s
        self._origins: dict[str, tuple[Origin, bytes]] = {}

    async def call(
        self,
        member: BrokerMember,
        method: str,
        path: str,
        *,
        params: Sequence[tuple[str, str]] | None = None,
        query: bytes = b"",
        json: Any = None,
        content: bytes | None = None,
        headers: Headers | Mapping[str, str] | None = None,
    ) -> BrokerAnswer:
        """``path`` is already encoded (see :func:`broker_path`); ``query`` a raw query string
        passed on as it came, or ``params`` to encode."""
        origin, host = self._origin(member.http_url)
        sent = _forwarded(headers)
        if json is not None:
            content = orjson.dumps(json)
            sent = [(k, v) for k, v in sent if k != b"content-type"]
            sent.append((b"content-type", b"application/json"))
        body = content or b""
        if params:
            query = urlencode(params).encode()
        target = path.encode() + (b"?" + query if query else b"")
        head = [b"%s %s HTTP/1.1\r\nhost: %s\r\n" % (method.encode(), target, host)]
        head.extend(b"%s: %s\r\n" % pair for pair in sent)
        if body or method in ("POST", "PUT", "PATCH"):
            head.append(b"content-length: %d\r\n" % len(body))
        head.append(b"\r\n")
        try:
            answer = await self.upstream.request(origin, b"".join(head), body, self.timeout_s)
        except UpstreamError as exc:
            raise BrokerUnreachableError(member, exc.reason) from None
        kept: dict[str, str] = {}
        content_type = "application/json"
        for name, value in answer.headers:
            if name == b"content-type":
                content_type = value.decode("latin-1")
            elif name in _KEPT_RESPONSE_HEADERS:
                kept[name.decode()] = value.decode("latin-1")
        return BrokerAnswer(answer.status, answer.body, content_type, kept)

    def _origin(self, url: str) -> tuple[Origin, bytes]:
        known = self._origins.get(url)
        if known is None:
            split = urlsplit(url)
            host, port = split.hostname or "127.0.0.1", split.port or 80
            known = self._origins[url] = ((host, port), f"{host}:{port}".encode())
        return known

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


def _forwarded(headers: Headers | Mapping[str, str] | None) -> list[tuple[bytes, bytes]]:
    if headers is None:
        return []
    if isinstance(headers, Headers):
        return [(k, v) for k, v in headers.raw if k in FORWARDED_HEADERS]
    return [
        (k.lower().encode(), v.encode("latin-1"))
        for k, v in headers.items()
        if k.lower().encode() in FORWARDED_HEADERS
    ]


def is_problem(answer: BrokerAnswer) -> bool:
    return answer.content_type.startswith(PROBLEM_MEDIA_TYPE)
