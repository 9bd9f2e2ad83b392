"""Bearer tokens: the auth file, its hashed entries, and making new tokens.

The auth file (``--auth-file``) is TOML, or JSON when its name ends in ``.json``. It holds
only SHA-256 digests of the tokens, never the tokens themselves::

    [[tokens]]
    name = "orders-service"          # shown in the audit log; unique
    sha256 = "9f86d081884c7d65..."   # hex digest of the token (spoolmq token create)
    produce = ["Orders", "Orders-*"] # topic patterns it may send to
    consume = ["billing:Orders*"]    # GROUP:TOPIC patterns it may consume with
    producer_groups = ["orders-tx"]  # producer group patterns of its transactions
    rate_per_s = 200                 # optional: its own rate limit (0: none) ...
    burst = 400                      # ... and burst
    max_parked_pulls = 20            # optional: its own cap on parked long-polls

    [[tokens]]
    name = "ops"
    sha256 = "..."
    admin = true

A token is 32 random bytes (``smq_`` + base64url), so one SHA-256 is a safe way to store it:
nothing is left to brute-force, and checking a token costs one hash per request.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from app.security.principals import ConsumeGrant, Pattern, Principal

TOKEN_PREFIX: Final = "smq_"
_HEX_DIGEST: Final = r"^[0-9a-fA-F]{64}$"
_NAME: Final = r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}$"
_PATTERN: Final = r"^[%|A-Za-z0-9_*?!\[\]-]{1,255}$"
_CONSUME: Final = r"^[%|A-Za-z0-9_*?!\[\]-]{1,255}:[%|A-Za-z0-9_*?!\[\]-]{1,255}$"
_BUCKET: Final = 16


class AuthFileError(Exception):
    """The auth file cannot be read or is not valid; the message says where and why."""


TopicPattern = Annotated[str, StringConstraints(pattern=_PATTERN)]


class _ConsumeEntry(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    group: TopicPattern
    topic: TopicPattern


class _TokenEntry(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    name: Annotated[str, StringConstraints(pattern=_NAME)]
    sha256: Annotated[str, StringConstraints(pattern=_HEX_DIGEST, to_lower=True)]
    admin: bool = False
    produce: list[TopicPattern] = Field(default_factory=list)
    consume: list[Annotated[str, StringConstraints(pattern=_CONSUME)] | _ConsumeEntry] = Field(
        default_factory=list
    )
    producer_groups: list[TopicPattern] = Field(default_factory=list)
    rate_per_s: float | None = Field(default=None, ge=0)
    burst: int | None = Field(default=None, ge=1)
    max_parked_pulls: int | None = Field(default=None, ge=0)

    def principal(self) -> Principal:
        grants = [
            ConsumeGrant.parse(c if isinstance(c, str) else f"{c.group}:{c.topic}")
            for c in self.consume
        ]
        return Principal(
            self.name,
            admin=self.admin,
            produce=tuple(Pattern.of(p) for p in self.produce),
            consume=tuple(grants),
            producer_groups=tuple(Pattern.of(p) for p in self.producer_groups),
            rate_per_s=self.rate_per_s,
            burst=self.burst,
            max_parked_pulls=self.max_parked_pulls,
        )


class _AuthFile(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    tokens: list[_TokenEntry] = Field(min_length=1)


def hash_token(token: str) -> str:
    """The hex SHA-256 digest the auth file stores for ``token``."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


class TokenRegistry:
    """The principals of an auth file, found by their token.

    Digests are bucketed by their first 16 hex digits, and a bucket's digests are compared
    with :func:`hmac.compare_digest`: the timing of a failed check depends only on the
    SHA-256 of the token tried, which tells nothing about any stored digest.
    """

    def __init__(self, entries: Mapping[str, Principal]) -> None:
        self._count = len(entries)
        self._named = {principal.name: (digest, principal) for digest, principal in entries.items()}
        self._buckets: dict[str, list[tuple[str, Principal]]] = {}
        for digest, principal in entries.items():
            self._buckets.setdefault(digest[:_BUCKET], []).append((digest, principal))

    def __len__(self) -> int:
        return self._count

    def admin_keys(self) -> frozenset[bytes]:
        """The digests of the admin tokens, as bytes: the keys a slave may prove on this
        master's HA port (:mod:`services.ha.auth`)."""
        return frozenset(
            bytes.fromhex(digest)
            for bucket in self._buckets.values()
            for digest, principal in bucket
            if principal.admin
        )

    def named(self, name: str) -> tuple[str, Principal] | None:
        """The digest and principal of the token called ``name``, or None: what a RocketMQ
        client's signature is checked with (its access key is the name, its secret the
        digest: :mod:`app.grpc.auth`)."""
        return self._named.get(name)

    def authenticate(self, token: str) -> Principal | None:
        """The principal of ``token``, or None."""
        digest = hash_token(token)
        found = None
        for stored, principal in self._buckets.get(digest[:_BUCKET], ()):
            if hmac.compare_digest(stored, digest):
                found = principal
        return found


def load_auth_file(path: Path) -> TokenRegistry:
    """Read and check ``path``; AuthFileError with a clear message when it is not valid."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise AuthFileError(f"cannot read the auth file {path}: {exc.strerror or exc}") from None
    data = _parse(path, raw)
    try:
        parsed = _AuthFile.model_validate(data)
    except ValidationError as exc:
        raise AuthFileError(f"the auth file {path} is not valid:\n{_explain(exc)}") from None
    return TokenRegistry(_principals(path, parsed.tokens))


def _parse(path: Path, raw: bytes) -> Any:
    try:
        text = raw.decode("utf-8")
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return tomllib.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise AuthFileError(f"the auth file {path} is not valid {kind}: {exc}") from None


def _explain(exc: ValidationError) -> str:
    lines = []
    for error in exc.errors(include_url=False)[:10]:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        lines.append(f"  {where.lstrip('.') or '(file)'}: {error['msg']}")
    return "\n".join(lines)


def _principals(path: Path, entries: Sequence[_TokenEntry]) -> dict[str, Principal]:
    by_digest: dict[str, Principal] = {}
    names: set[str] = set()
    for index, entry in enumerate(entries):
        where = f"the auth file {path}: tokens[{index}]"
        if entry.name in names:
            raise AuthFileError(f"{where}: the name {entry.name!r} is used twice")
        if entry.sha256 in by_digest:
            raise AuthFileError(f"{where}: this sha256 is already another token's")
        names.add(entry.name)
        by_digest[entry.sha256] = entry.principal()
    return by_digest


def entry_toml(
    name: str,
    digest: str,
    *,
    admin: bool = False,
    produce: Sequence[str] = (),
    consume: Sequence[str] = (),
    producer_groups: Sequence[str] = (),
    rate_per_s: float | None = None,
    burst: int | None = None,
    max_parked_pulls: int | None = None,
) -> str:
    """The ``[[tokens]]`` table of one token, ready to paste into the auth file."""
    lines = ["[[tokens]]", f"name = {json.dumps(name)}", f'sha256 = "{digest}"']
    if admin:
        lines.append("admin = true")
    if produce:
        lines.append(f"produce = {json.dumps(list(produce))}")
    if consume:
        lines.append(f"consume = {json.dumps(list(consume))}")
    if producer_groups:
        lines.append(f"producer_groups = {json.dumps(list(producer_groups))}")
    for key, value in (
        ("rate_per_s", rate_per_s),
        ("burst", burst),
        ("max_parked_pulls", max_parked_pulls),
    ):
        if value is not None:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def replica_keys(auth_file: Path | None) -> frozenset[bytes] | None:
    """What slaves prove on the HA port: the admin tokens of ``auth_file`` (None without
    one: the HA port is open). AuthFileError when the file is not valid."""
    return None if auth_file is None else load_auth_file(auth_file).admin_keys()
