"""The pure-ASGI guard in front of every route.

For a request to ``/v1``, ``/metrics`` or the docs it: finds the route the router will pick
(:class:`~app.security.routing.RouteResolver`), authenticates the bearer token (401), takes
one request from the token's bucket (429), checks the route's rule (403) — all before the
route runs or anything is looked up — then caps the byte budget of pulls, counts the
token's long-polls (429) and writes admin actions to the audit log.

``/admin`` pages need an admin: a session cookie from the login form (every state-changing
request also carries the session's CSRF token) or an admin bearer token. Without an auth
file everybody is the anonymous admin, and admin forms still need the CSRF token of a
``spoolmq_csrf`` cookie. Admin views find the caller's name in ``request.state.principal``
and the token their forms must carry in ``request.state.csrf_token`` (the templates'
``csrf_token()`` global reads it).

It sits inside :class:`app.middleware.HttpShellMiddleware`, so refusals carry the request id
and body reads here are under the same size cap and read timeout as the routes'.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qsl, quote, urlencode

from pydantic import TypeAdapter, ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PROBLEM_MEDIA_TYPE, problem_body
from app.routes.direct import query_pairs
from app.routes.table import RouteTable
from app.schemas.messages import MAX_BYTES_PARAMETER
from app.security.audit import AuditRecord, target_of, utc_now
from app.security.guard import Refusal, Security, dry_run, forbidden, unauthorized
from app.security.login import LOGIN_PATH
from app.security.policy import SAFE_METHODS, Access, Rule, is_audited, rule_for
from app.security.principals import ANONYMOUS, Principal
from app.security.sessions import (
    CSRF_COOKIE,
    SESSION_COOKIE,
    STATE_KEY,
    Session,
    csrf_from_body,
    csrf_from_header,
    is_form,
    is_https,
    new_secret,
    request_cookies,
    set_cookie,
    tokens_match,
)
from services import Broker

ADMIN_PREFIX: Final = "/admin"
_LAX_INT: Final = TypeAdapter(int)


class SecurityMiddleware:
    def __init__(
        self, app: ASGIApp, security: Security, routes: RouteTable, broker: Broker
    ) -> None:
        self.app = app
        self.security = security
        self.routes = routes
        self.broker = broker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        try:
            if path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
                await self._admin(scope, receive, send)
            else:
                await self._api(scope, receive, send)
        except Refusal as refusal:
            await send_refusal(scope, send, refusal)

    # ================================================================ /v1, health, docs

    async def _api(self, scope: Scope, receive: Receive, send: Send) -> None:
        security = self.security
        resolved = self.routes.find(scope)
        rule = None if resolved is None else rule_for(resolved.key)
        if rule is not None and rule.access is Access.PUBLIC:
            await self.app(scope, receive, send)
            return
        audited = rule is not None and is_audited(rule, scope["method"])
        if not security.auth_enabled and not audited and (rule is None or not rule.pull):
            # Anonymous (loopback) mode: nothing to check, count or record on this route.
            await self.app(scope, receive, send)
            return
        principal = self._authenticate(scope, rule)
        state = scope.setdefault("state", {})
        state["principal"] = principal.name  # e.g. a POP holder
        state["caller"] = principal  # e.g. what a transaction check poll may see
        security.check_rate(principal)
        if resolved is None or rule is None:  # no such route: 404/405 for a known caller
            await self.app(scope, receive, send)
            return
        params = resolved.path_params
        # read by name only: a dict's get, not QueryParams' (a KeyError per absent name)
        query = dict(query_pairs(scope["query_string"])) if rule.reads_query else {}
        what = resolved.key or scope["path"]
        try:
            security.check_rule(principal, rule, params, query)
        except Refusal as refusal:
            if audited:
                record = _record(scope, principal, what, target_of(params, ""), utc_now())
                await self._audit(record, refusal.status)
            raise
        if rule.body is not None or (audited and rule.dry_run_in_body):
            body, receive = await read_body(receive)
            security.check_body(principal, rule, params, body, self.broker)
            audited = audited and not (rule.dry_run_in_body and dry_run(body))
        if rule.long_poll_in_body:
            body, receive = await read_body(receive)
            await self._long_poll(scope, receive, send, principal, _body_wait_ms(body))
        elif rule.pull:
            await self._pull(scope, receive, send, principal, query)
        elif audited:
            await self._audited(scope, receive, send, principal, what, target_of(params, ""))
        else:
            await self.app(scope, receive, send)

    def _authenticate(self, scope: Scope, rule: Rule | None) -> Principal:
        if not self.security.auth_enabled:
            return ANONYMOUS
        principal = self.security.bearer_principal(_header(scope, b"authorization"))
        if principal is not None:
            return principal
        if rule is not None and rule.browser and scope["method"] in SAFE_METHODS:
            session = self._session(scope)
            if session is not None:
                return session.principal
        raise unauthorized("this request needs a token: Authorization: Bearer <token>")

    async def _pull(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: Principal,
        query: Mapping[str, str],
    ) -> None:
        _cap_max_bytes(scope, query, self.security.options.max_pull_bytes)
        await self._long_poll(scope, receive, send, principal, _int(query.get("wait_ms")))

    async def _long_poll(
        self, scope: Scope, receive: Receive, send: Send, principal: Principal, wait_ms: int
    ) -> None:
        """Count a request that may park (``wait_ms`` > 0) against the token's cap."""
        if wait_ms <= 0:
            await self.app(scope, receive, send)
            return
        security = self.security
        security.enter_long_poll(principal)
        try:
            await self.app(scope, receive, send)
        finally:
            security.leave_long_poll(principal)

    # ================================================================ /admin

    async def _admin(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == LOGIN_PATH:
            await self.app(scope, receive, send)  # the login route checks its own CSRF token
            return
        security = self.security
        state = scope.setdefault("state", {})
        new_cookie = None
        if security.auth_enabled:
            principal, session = self._admin_principal(scope)
            if not principal.admin:
                await self._refuse_admin_page(scope, principal)
            security.check_rate(principal)
            expected = None if session is None else session.csrf_token
        else:
            principal, session = ANONYMOUS, None
            expected = request_cookies(scope).get(CSRF_COOKIE)
            if not expected:
                expected = new_cookie = new_secret()
        state["principal"] = principal.name
        if expected is not None:
            state[STATE_KEY] = expected
            if scope["method"] not in SAFE_METHODS:
                receive = await self._check_csrf(scope, receive, expected)
        if new_cookie is not None:
            send = _with_cookie(send, CSRF_COOKIE, new_cookie, self._secure(scope))
        if scope["method"] in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        what = f"{scope['method']} {scope['path']}"
        await self._audited(scope, receive, send, principal, what, scope["path"])

    def _admin_principal(self, scope: Scope) -> tuple[Principal, Session | None]:
        """An admin bearer token (no CSRF: browsers never add it by themselves) or session."""
        principal = self.security.bearer_principal(_header(scope, b"authorization"))
        session = None
        if principal is None:
            session = self._session(scope)
            if session is None:
                raise _login_needed(scope)
            principal = session.principal
        return principal, session

    async def _refuse_admin_page(self, scope: Scope, principal: Principal) -> None:
        refusal = forbidden(principal, "use the admin pages: they need an admin token")
        if scope["method"] not in SAFE_METHODS:
            what = f"{scope['method']} {scope['path']}"
            await self._audit(_record(scope, principal, what, scope["path"], utc_now()), 403)
        raise refusal

    def _session(self, scope: Scope) -> Session | None:
        return self.security.sessions.get(request_cookies(scope).get(SESSION_COOKIE))

    async def _check_csrf(self, scope: Scope, receive: Receive, expected: str) -> Receive:
        given = csrf_from_header(scope)
        content_type = (_header(scope, b"content-type") or b"").decode("latin-1")
        if given is None and is_form(content_type):
            body, receive = await read_body(receive)
            given = csrf_from_body(content_type, body)
        if not tokens_match(expected, given):
            raise Refusal(
                "CSRF_FAILED",
                "the form's CSRF token is missing or stale: reload the page and try again",
            )
        return receive

    def _secure(self, scope: Scope) -> bool:
        return self.security.options.secure_cookies or is_https(scope)

    # ================================================================ audit

    async def _audited(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        principal: Principal,
        what: str,
        target: str,
    ) -> None:
        record = _record(scope, principal, what, target, utc_now())
        status = 500  # unless a response starts: the app failed
        written = False

        async def watch(message: Message) -> None:
            # The line is written before the answer starts: a client that got its answer
            # finds its action in the log.
            nonlocal status, written
            if message["type"] == "http.response.start":
                status, written = message["status"], True
                await self._audit(record, status)
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            if not written:
                await self._audit(record, status)

    async def _audit(self, record: AuditRecord, status: int) -> None:
        record = dataclasses.replace(record, result=status)
        await asyncio.to_thread(self.security.audit.write, record)


# ==================================================================== helpers


def _record(scope: Scope, principal: Principal, what: str, target: str, when: str) -> AuditRecord:
    request_id = scope.get("state", {}).get("request_id", "")
    return AuditRecord(when, principal.name, what, target or scope["path"], 0, request_id)


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _int(value: str | None) -> int:
    """A query value as the route's model reads it ("5.0" is 5); 0 when it is refused."""
    if value is None:
        return 0
    try:
        return _LAX_INT.validate_python(value)
    except ValidationError:
        return 0  # the route refuses it with 422


def _cap_max_bytes(scope: Scope, query: Mapping[str, str], cap: int) -> None:
    """Give a pull a byte budget of at most ``cap`` (one message may still be larger).

    A pull without ``max_bytes`` gets ``cap``; a larger (valid) one is cut to it; a value
    the schema refuses is left for the route's 422.
    """
    raw: bytes = scope.get("query_string", b"")
    asked = query.get("max_bytes")
    if asked is None:
        scope["query_string"] = raw + (b"&" if raw else b"") + b"max_bytes=%d" % cap
        return
    value = _int(asked)
    if cap < value <= MAX_BYTES_PARAMETER:
        pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True)
        capped = [(k, str(cap) if k == "max_bytes" else v) for k, v in pairs]
        scope["query_string"] = urlencode(capped).encode("ascii")


def _body_wait_ms(body: bytes) -> int:
    """``wait_ms`` of a JSON body; 0 when absent or not a number (the route's 422 then)."""
    try:
        value = json.loads(body).get("wait_ms", 0)
    except (ValueError, AttributeError):
        return 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


async def read_body(receive: Receive) -> tuple[bytes, Receive]:
    """Read the whole body, and a ``receive`` that hands it to the app once more."""
    chunks: list[bytes] = []
    pending: list[Message] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            pending.append(message)  # the client went away
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    pending.insert(0, {"type": "http.request", "body": body, "more_body": False})

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return body, replay


def _with_cookie(send: Send, name: str, value: str, secure: bool) -> Send:
    async def send_with_cookie(message: Message) -> None:
        if message["type"] == "http.response.start":
            header = set_cookie(name, value, secure=secure)
            message["headers"] = [*message.get("headers", ()), header]
        await send(message)

    return send_with_cookie


def _login_needed(scope: Scope) -> Refusal:
    """A browser goes to the login form; htmx is told to; other clients get a 401."""
    target = scope["path"]
    if scope.get("query_string"):
        target += "?" + scope["query_string"].decode("latin-1")
    login = f"{LOGIN_PATH}?next={quote(target, safe='')}"
    if _header(scope, b"hx-request") == b"true":
        return Refusal("UNAUTHORIZED", "log in first", {"HX-Redirect": login})
    if scope["method"] in ("GET", "HEAD"):
        return Refusal("LOGIN_REQUIRED", "log in first", {"Location": login})
    return unauthorized("log in on /admin/login, or use an admin bearer token")


async def send_refusal(scope: Scope, send: Send, refusal: Refusal) -> None:
    request_id = scope.get("state", {}).get("request_id", "")
    body = problem_body(refusal.status, refusal.code, refusal.detail, scope["path"], request_id)
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
    ]
    headers += [(k.lower().encode(), v.encode("latin-1")) for k, v in refusal.headers.items()]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
