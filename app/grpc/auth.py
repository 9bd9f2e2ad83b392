"""Who calls the gRPC face: RocketMQ's AccessKey signature, checked against the auth file.

A RocketMQ 5 client given credentials signs every call with the ``authorization`` metadata
``MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>``,
the signature being HMAC-SHA1 of the ``x-mq-date-time`` metadata keyed with its secret. With
an auth file (``--auth-file``) the access key is a token's ``name`` and the secret is the
token's hex SHA-256 digest (its ``sha256`` in the file, ``printf %s "$TOKEN" | sha256sum``):
the file holds no token, so the digest is what both sides know. As for the HA port's slaves,
whoever may read the auth file may sign as any of its tokens.

A call without a valid signature answers ``UNAUTHORIZED``; a token lacking the grant,
``FORBIDDEN``: the grants are the HTTP API's (``produce`` topics, ``consume`` group:topic
pairs, ``producer_groups`` for transactions, whose producer group over gRPC is the topic).
Without an auth file every caller is :data:`~app.security.principals.ANONYMOUS`, as over HTTP.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from typing import Any, Final

import grpc

from app.grpc.convert import ProtocolError
from app.grpc.protocol import Code
from app.security.principals import ANONYMOUS, Principal
from app.security.tokens import TokenRegistry

AUTHORIZATION: Final = "authorization"
DATE_TIME: Final = "x-mq-date-time"
ALGORITHM: Final = "MQv2-HMAC-SHA1"
_FIELDS: Final = re.compile(r"\s*([A-Za-z]+)=([^,\s]*)\s*(?:,|$)")

Metadata = Iterable[tuple[str, str | bytes]]
Context = grpc.aio.ServicerContext[Any, Any]


def signature(secret: str, date_time: str) -> str:
    """The hex HMAC-SHA1 a client sends for ``date_time`` with ``secret``."""
    return hmac.new(secret.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def parse_authorization(value: str) -> dict[str, str]:
    """The fields of an ``authorization`` value (``Credential``, ``SignedHeaders``,
    ``Signature``); ProtocolError(UNAUTHORIZED) when it is not RocketMQ's form."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise unauthorized(f"the authorization is not {ALGORITHM}")
    fields = dict(_FIELDS.findall(rest))
    if not fields.get("Credential") or not fields.get("Signature"):
        raise unauthorized("the authorization needs a Credential and a Signature")
    return fields


def unauthorized(message: str) -> ProtocolError:
    return ProtocolError(Code.UNAUTHORIZED, message)


def forbidden(principal: Principal, what: str) -> ProtocolError:
    return ProtocolError(Code.FORBIDDEN, f"the token {principal.name!r} may not {what}")


class Guard:
    """The callers of the face and what they may do; ``tokens`` None: no auth file."""

    def __init__(self, tokens: TokenRegistry | None) -> None:
        self.tokens = tokens

    def caller_of(self, context: Context) -> Principal:
        """The principal of a call: :meth:`caller` of its metadata."""
        return self.caller(context.invocation_metadata() or ())

    def caller(self, metadata: Metadata) -> Principal:
        """The principal whose signature ``metadata`` carries."""
        if self.tokens is None:
            return ANONYMOUS
        said = {key: value if isinstance(value, str) else value.decode() for key, value in metadata}
        if AUTHORIZATION not in said:
            raise unauthorized("sign the call: an auth file protects this broker")
        fields = parse_authorization(said[AUTHORIZATION])
        found = self.tokens.named(fields["Credential"])
        if found is None:
            raise unauthorized("no token has this access key")
        secret, principal = found
        expected = signature(secret, said.get(DATE_TIME, ""))
        if not hmac.compare_digest(expected, fields["Signature"].lower()):
            raise unauthorized("the signature does not match the access key's secret")
        return principal

    @staticmethod
    def require_produce(principal: Principal, topic: str) -> None:
        if not principal.may_produce(topic):
            raise forbidden(principal, f"produce to {topic!r}")

    @staticmethod
    def require_producer_group(principal: Principal, producer_group: str) -> None:
        if not principal.may_produce_as(producer_group):
            raise forbidden(principal, f"end or check transactions of {producer_group!r}")

    @staticmethod
    def require_consume(principal: Principal, group: str, topic: str) -> None:
        if not principal.may_consume(group, topic):
            raise forbidden(principal, f"consume {topic!r} with group {group!r}")

    @staticmethod
    def require_see(principal: Principal, topic: str) -> None:
        if not principal.may_see_topic(topic):
            raise forbidden(principal, f"see topic {topic!r}")
