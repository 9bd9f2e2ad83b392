"""The security state of one app and its decisions: who is calling, may they, how much.

:class:`Security` is built from the settings (reading the auth file) and kept on
``app.state.security``; :mod:`app.security.middleware` asks it about every request. Each
``check_*`` raises :class:`Refusal` (401, 403 or 429) or returns quietly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from app.problem_codes import STATUS_BY_CODE
from app.security.audit import AuditLog
from app.security.policy import Access, BodyCheck, Param, Rule
from app.security.principals import ANONYMOUS, Principal
from app.security.quotas import ParkedPulls, QuotaDefaults, RateLimiter
from app.security.sessions import SessionStore
from app.security.tokens import TokenRegistry, load_auth_file
from app.settings import Settings
from services import Broker, original_topic
from services.errors import InvalidMessageIdError

REALM: Final = 'Bearer realm="spoolmq"'
_MSG_ID: Final = re.compile(r"^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})$")


class Refusal(Exception):
    """A request refused before its route runs: stable code, detail, headers (the status is
    the code's, from :data:`app.problem_codes.STATUS_BY_CODE`)."""

    def __init__(self, code: str, detail: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = STATUS_BY_CODE[code]
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})


def unauthorized(detail: str, error: str | None = None) -> Refusal:
    challenge = REALM if error is None else f'{REALM}, error="{error}"'
    return Refusal("UNAUTHORIZED", detail, {"WWW-Authenticate": challenge})


def forbidden(principal: Principal, what: str) -> Refusal:
    return Refusal("FORBIDDEN", f"the token {principal.name!r} may not {what}")


@dataclass(frozen=True, slots=True)
class SecurityOptions:
    """The settings the security layer reads."""

    quotas: QuotaDefaults = field(default_factory=QuotaDefaults)
    max_pull_bytes: int = 8 * 1024 * 1024
    secure_cookies: bool = False
    session_ttl_s: float = 8 * 3600


class Security:
    """Tokens, sessions, quotas and the audit log of one app."""

    def __init__(
        self, registry: TokenRegistry | None, audit: AuditLog, options: SecurityOptions
    ) -> None:
        self.registry = registry
        self.audit = audit
        self.options = options
        self.sessions = SessionStore(options.session_ttl_s)
        self.rate = RateLimiter(options.quotas)
        self.parked = ParkedPulls(options.quotas)

    @classmethod
    def from_settings(cls, settings: Settings) -> Security:
        """Read the auth file (AuthFileError when it is not valid)."""
        registry = None if settings.auth_file is None else load_auth_file(settings.auth_file)
        audit_path = settings.audit_log or Path(settings.store_dir) / "audit.log"
        options = SecurityOptions(
            quotas=QuotaDefaults(
                settings.rate_limit_per_s,
                settings.rate_limit_burst,
                settings.max_parked_pulls_per_token,
            ),
            max_pull_bytes=settings.max_pull_bytes,
            secure_cookies=settings.secure_cookies,
            session_ttl_s=settings.admin_session_ttl_s,
        )
        return cls(registry, AuditLog(audit_path), options)

    @property
    def auth_enabled(self) -> bool:
        return self.registry is not None

    # ------------------------------------------------------------------ who

    def bearer_principal(self, authorization: bytes | None) -> Principal | None:
        """The principal of an ``Authorization: Bearer`` header; None without the header.

        Raises a 401 Refusal for a malformed header or an unknown token.
        """
        if self.registry is None:
            return ANONYMOUS
        if authorization is None:
            return None
        scheme, _, token = authorization.decode("latin-1").strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("use Authorization: Bearer <token>", "invalid_request")
        principal = self.registry.authenticate(token)
        if principal is None:
            raise unauthorized("the bearer token is not valid", "invalid_token")
        return principal

    # ------------------------------------------------------------------ may they

    def check_rule(
        self,
        principal: Principal,
        rule: Rule,
        path_params: Mapping[str, Any],
        query: Mapping[str, str],
    ) -> None:
        """403 unless ``principal`` may call a route with ``rule`` (no lookups, no body)."""
        if principal.admin or rule.access in (Access.PUBLIC, Access.AUTHENTICATED):
            return
        topic = _value(rule.topic, path_params, query)
        group = _value(rule.group, path_params, query)
        access = rule.access
        if access is Access.ADMIN:
            raise forbidden(principal, "do this: it needs an admin token")
        if access is Access.PRODUCE and not principal.may_produce(topic or ""):
            raise forbidden(principal, f"produce to topic {topic!r}")
        if access is Access.SEE_TOPIC and not principal.may_see_topic(topic or ""):
            raise forbidden(principal, f"produce to or consume topic {topic!r}")
        if access is Access.PRODUCER_GROUP and not principal.may_produce_as(group or ""):
            raise forbidden(principal, f"send transactions as producer group {group!r}")
        if access is Access.CONSUME and not principal.may_consume(group, topic):
            raise forbidden(principal, _consume_text(group, topic))

    def check_body(
        self,
        principal: Principal,
        rule: Rule,
        path_params: Mapping[str, Any],
        body: bytes,
        broker: Broker,
    ) -> None:
        """The checks that need the body or a message's topic (``rule.body``)."""
        if principal.admin or rule.body is None:
            return
        group = path_params.get("group")
        if rule.body is BodyCheck.OFFSET_TOPICS:
            for topic in _offset_topics(body):
                if not principal.may_consume(group, topic):
                    raise forbidden(principal, _consume_text(group, topic))
        elif rule.body is BodyCheck.SENT_BACK_MESSAGE:
            _check_sent_back(principal, group, body, broker)
        elif rule.body is BodyCheck.MESSAGE_BY_ID:
            _check_message_by_id(principal, str(path_params.get("msg_id", "")), broker)
        elif rule.body is BodyCheck.HALF_MESSAGE:
            producer_group = _body_field(body, "producer_group")
            if producer_group is not None and not principal.may_produce_as(producer_group):
                raise forbidden(
                    principal, f"send transactions as producer group {producer_group!r}"
                )
        elif rule.body is BodyCheck.TRANSACTION:
            _check_transaction(principal, str(path_params.get("transaction_id", "")), broker)

    # ------------------------------------------------------------------ how much

    def check_rate(self, principal: Principal) -> None:
        wait = self.rate.admit(principal)
        if wait:
            raise Refusal(
                "RATE_LIMITED",
                f"the token {principal.name!r} is over its request rate; retry in {wait} s",
                {"Retry-After": str(wait)},
            )

    def enter_long_poll(self, principal: Principal) -> None:
        """Count a long-poll of ``principal``; 429 when it already has its cap in flight."""
        if principal.anonymous or self.parked.enter(principal):
            return
        cap = self.parked.cap(principal)
        raise Refusal(
            "TOO_MANY_WAITERS",
            f"the token {principal.name!r} already has {cap} long-polls waiting (its cap); "
            "retry in 1 s",
            {"Retry-After": "1"},
        )

    def leave_long_poll(self, principal: Principal) -> None:
        if not principal.anonymous:
            self.parked.leave(principal)


def _value(
    param: Param | None, path_params: Mapping[str, Any], query: Mapping[str, str]
) -> str | None:
    if param is None:
        return None
    source = path_params if param.where == "path" else query
    value = source.get(param.name)
    return None if value is None else str(value)


def _consume_text(group: str | None, topic: str | None) -> str:
    what = "any topic" if topic is None else f"topic {topic!r}"
    who = "any group" if group is None else f"group {group!r}"
    return f"consume {what} with {who}"


def _json(body: bytes) -> Any:
    """The body as the routes parse it (the standard library), None when not JSON."""
    try:
        return json.loads(body) if body else None
    except (ValueError, RecursionError):  # JSONDecodeError, bad UTF-8, too deeply nested
        return None


def _offset_topics(body: bytes) -> list[str]:
    """Every ``offsets[].topic`` string; a body of another shape is refused by the route."""
    data = _json(body)
    offsets = data.get("offsets") if isinstance(data, dict) else None
    if not isinstance(offsets, list):
        return []
    return [o["topic"] for o in offsets if isinstance(o, dict) and isinstance(o.get("topic"), str)]


def _body_field(body: bytes, name: str) -> str | None:
    """A JSON body's string field ``name``; None when absent (the route refuses the body)."""
    data = _json(body)
    value = data.get(name) if isinstance(data, dict) else None
    return value if isinstance(value, str) else None


def dry_run(body: bytes) -> bool:
    data = _json(body)
    return isinstance(data, dict) and data.get("dry_run") is True


def _check_sent_back(principal: Principal, group: str | None, body: bytes, broker: Broker) -> None:
    """The message must be of a topic the token may consume with the group.

    A message that cannot be found is refused too (for this token, "not found" and "not
    yours" are one answer): a lookup that failed here and succeeded in the route a moment
    later must not let a message through unchecked.
    """
    data = _json(body)
    if not isinstance(data, dict):
        return  # the route refuses it (400/422) without looking anything up
    msg_id, offset = data.get("msg_id"), data.get("commit_log_offset")
    if not isinstance(msg_id, str):
        msg_id = None
    if not isinstance(offset, int) or isinstance(offset, bool):
        offset = None
    if msg_id is None and offset is None:
        return  # names no message: the route refuses it
    try:
        found = broker.send_back.find(msg_id, offset)  # the lookup the route makes
    except Exception:
        found = None
    if found is None or not principal.may_consume(group, original_topic(found)):
        raise forbidden(principal, f"send back this message for group {group!r}")


def _check_message_by_id(principal: Principal, msg_id: str, broker: Broker) -> None:
    if not _MSG_ID.match(msg_id):
        return  # malformed: the route answers 400 without a lookup
    try:
        found = broker.messages.by_id(msg_id)
    except InvalidMessageIdError:
        return
    except Exception:
        found = None
    if found is None or not principal.may_consume(None, found.topic):
        raise forbidden(principal, f"read message {msg_id}")


def _check_transaction(principal: Principal, transaction_id: str, broker: Broker) -> None:
    """Only a producer of its topic, with its producer group, reads or ends a transaction
    (403 whether it exists)."""
    try:
        transaction = broker.transactions.transaction(transaction_id)
    except Exception:
        transaction = None
    if (
        transaction is None
        or not principal.may_produce(transaction.topic)
        or not principal.may_produce_as(transaction.producer_group)
    ):
        raise forbidden(principal, f"read or end transaction {transaction_id[:80]}")
