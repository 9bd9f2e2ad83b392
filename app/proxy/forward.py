"""Forwarding to brokers over the proxy's keep-alive connections, and the proxy's own errors.

A broker's answer (any status) comes back as :class:`BrokerAnswer`. A broker that gives none
is one of two errors, both 503 + Retry-After when they reach the client (a read or an
idempotent write may simply be repeated); a send tells them apart (:mod:`app.proxy.sending`):

    ProxyError
     └── BrokerUnreachableError     the request never reached the broker
          └── BrokerNoAnswerError   it was written (or may have been); no complete answer came

Every forwarded request carries the request's ``X-Request-Id`` (the client's, or the one the
proxy made), so the broker's answer, its problem bodies and its logs name the same id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlencode, urlsplit

import orjson
from starlette.requests import Request
from starlette.responses import Response

from app.errors import PROBLEM_MEDIA_TYPE, ApiError
from app.labels import MESSAGE_COUNT_HEADER as MESSAGE_COUNT
from app.proxy.upstream import Body, NotSentError, Origin, Upstream, UpstreamAnswer
from app.responses import BytesResponse
from app.schemas.messages import RECORDS_HEADERS
from services.cluster import BrokerMember, ClusterLabels

RETRY_AFTER_S = 1
FORWARDED_HEADERS: Final = frozenset((b"content-type", b"authorization"))
_KEPT_RESPONSE_HEADERS: Final = frozenset(
    (b"retry-after", b"location", b"idempotent-replayed", b"spoolmq-epoch")
) | frozenset(name.encode() for name in RECORDS_HEADERS)  # a range read's offsets
MESSAGE_COUNT_HEADER: Final = MESSAGE_COUNT.encode()
"""How many messages a labelled group pull or POP receive holds (the broker says it, so the
proxy need not read the answer to share a consumer's budget)."""
_BODY_METHODS: Final = frozenset(("POST", "PUT", "PATCH"))
_MAX_LINES: Final = 4096
READ_TIMEOUT_S: Final = 10.0
"""How long the proxy waits for a broker's answer, beyond a long-poll's own ``wait_ms``."""


class ProxyError(ApiError):
    """An answer the proxy gives itself: a problem+json whose status its code decides."""


class BrokerUnreachableError(ProxyError):
    """The request never reached the broker (refused, connect timeout, no free connection)."""

    def __init__(self, member: BrokerMember, reason: str) -> None:
        super().__init__(
            "BROKER_UNAVAILABLE",
            f"broker {member.name} of group {member.group} does not answer: {reason}",
            {"Retry-After": str(RETRY_AFTER_S)},
        )
        self.member = member


class BrokerNoAnswerError(BrokerUnreachableError):
    """The request was written, or may have been; no complete answer came (the broker may
    have acted on it)."""


@dataclass(slots=True)
class BrokerAnswer:
    """A broker's HTTP answer, kept to pass on or to rewrite."""

    status: int
    content: bytes
    content_type: str
    kept: list[tuple[bytes, bytes]]
    """The broker's headers a client gets, as they came."""
    message_count: int | None = None
    """The messages of a labelled group pull or POP receive (:data:`MESSAGE_COUNT_HEADER`)."""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return orjson.loads(self.content)

    def problem_code(self) -> str | None:
        """The ``code`` of a problem answer, None for anything else."""
        if not is_problem(self):
            return None
        try:
            code = orjson.loads(self.content).get("code")
        except (orjson.JSONDecodeError, AttributeError):
            return None
        return code if isinstance(code, str) else None

    def response(
        self, content: bytes | None = None, kept: list[tuple[bytes, bytes]] | None = None
    ) -> Response:
        """Pass the answer on, unchanged or with ``content`` (rewritten) as its body; the
        broker's :attr:`kept` headers first (or ``kept``: those of them the client gets)."""
        body = self.content if content is None else content
        response = BytesResponse(body, self.status, None, self.content_type)
        kept = self.kept if kept is None else kept
        if kept:
            response.raw_headers[:0] = kept
        return response

    def with_body(self, body: Any) -> Response:
        """Pass the answer on with a rewritten JSON body."""
        return self.response(orjson.dumps(body))


def is_problem(answer: BrokerAnswer) -> bool:
    return answer.content_type.startswith(PROBLEM_MEDIA_TYPE)


def broker_path(*segments: str | int) -> str:
    """``/v1/…`` from path segments, each percent-encoded (a topic may hold ``%``)."""
    return "".join("/" + quote(str(s), safe="") for s in segments)


class Forwarder:
    """Sends one request to one broker member."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self._origins: dict[str, tuple[Origin, bytes]] = {}
        self._lines: dict[tuple[str, str, str], tuple[Origin, bytes, bytes]] = {}

    async def call(
        self,
        member: BrokerMember,
        method: str,
        path: str,
        *,
        request: Request | None = None,
        params: Sequence[tuple[str, str]] | None = None,
        query: bytes = b"",
        json: Any = None,
        content: Body | None = None,
        headers: Sequence[tuple[bytes, bytes]] = (),
        labels: ClusterLabels | None = None,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> BrokerAnswer:
        """``path`` is already encoded (see :func:`broker_path`); ``query`` a raw query string
        passed on as it came, or ``params`` to encode. The client's Content-Type and
        Authorization go along (``json`` sets its own Content-Type), with ``headers``;
        ``labels``: the cluster's labels the broker is to put in its answer."""
        origin, line, host = self.line(member.http_url, method, path)
        body = content or b""
        if json is not None:
            body = _encoded(json)
        if params:
            query = urlencode(params).encode()
        head = [line, b"?", query, host] if query else [line, host]
        if request is not None:
            scope = request.scope
            forwarded(head, scope["headers"], scope.get("state", {}).get("request_id"), json)
        elif json is not None:
            head.append(b"content-type: application/json\r\n")
        for name, value in (*headers, *(labels.headers() if labels is not None else ())):
            head += (name, b": ", value, b"\r\n")
        if body or method in _BODY_METHODS:
            length = sum(map(len, body)) if isinstance(body, tuple) else len(body)
            head.append(b"content-length: %d\r\n\r\n" % length)
        else:
            head.append(b"\r\n")
        try:
            answer = await self.upstream.request(origin, b"".join(head), body, timeout_s)
        except NotSentError as exc:
            raise BrokerUnreachableError(member, exc.reason) from None
        except Exception as exc:  # OutcomeUnknownError, or anything else once written
            raise BrokerNoAnswerError(member, getattr(exc, "reason", repr(exc))) from None
        return broker_answer(answer)

    def line(self, url: str, method: str, path: str) -> tuple[Origin, bytes, bytes]:
        """The broker's address, the request line up to its query (``POST /v1/...``) and
        the rest of it with the Host header: made once per broker, method and path (a
        proxy's busiest paths are few), not formatted per request."""
        key = (url, method, path)
        known = self._lines.get(key)
        if known is None:
            origin, host = self._origin(url)
            line = b"%s %s" % (method.encode(), path.encode())
            known = (origin, line, b" HTTP/1.1\r\nhost: %s\r\n" % host)
            if len(self._lines) >= _MAX_LINES:  # paths name topics and message ids: bounded
                self._lines.clear()
            self._lines[key] = known
        return known

    def _origin(self, url: str) -> tuple[Origin, bytes]:
        known = self._origins.get(url)
        if known is None:
            split = urlsplit(url)
            https = split.scheme == "https"
            host, port = split.hostname or "127.0.0.1", split.port or (443 if https else 80)
            if https:
                self.upstream.use_tls(host, port)
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


def _encoded(json: Any) -> bytes:
    """A body the proxy made from a client's JSON: one nested deeper than orjson writes (it
    reads more levels than it writes) is the client's mistake, as the broker would say."""
    try:
        return orjson.dumps(json)
    except orjson.JSONEncodeError as exc:
        raise ApiError(
            "VALIDATION_FAILED", f"the request body cannot be passed on: {exc}"
        ) from None


def broker_answer(answer: UpstreamAnswer) -> BrokerAnswer:
    """An answer as the proxy passes it on: its Content-Type and the headers a client gets."""
    kept: list[tuple[bytes, bytes]] = []
    content_type = "application/json"
    count: int | None = None
    for name, value in answer.headers:
        if name == b"content-type":
            content_type = value.decode("latin-1")
        elif name in _KEPT_RESPONSE_HEADERS:
            kept.append((name, value))
        elif name == MESSAGE_COUNT_HEADER and value.isdigit():
            count = int(value)
    return BrokerAnswer(answer.status, answer.body, content_type, kept, count)


def forwarded(
    head: list[bytes], headers: Sequence[tuple[bytes, bytes]], request_id: str | None, json: Any
) -> None:
    """The client's ``headers`` a broker gets and the request's id, as lines of ``head``; a
    JSON body the proxy made (``json`` not None) goes with its own Content-Type instead of the
    client's."""
    for name, value in headers:
        if name in FORWARDED_HEADERS and not (json is not None and name == b"content-type"):
            head += (name, b": ", value, b"\r\n")
    if request_id:
        head += (b"x-request-id: ", request_id.encode(), b"\r\n")
    if json is not None:
        head.append(b"content-type: application/json\r\n")


def long_poll_timeout(wait_ms: object) -> float:
    """How long to wait for a broker that may park the request for ``wait_ms``."""
    wait_s = wait_ms / 1000 if isinstance(wait_ms, int) and not isinstance(wait_ms, bool) else 0
    return READ_TIMEOUT_S + max(0.0, min(wait_s, 60.0))
