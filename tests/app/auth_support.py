"""A live server with an auth file, and clients that present its tokens (issue 8 tests)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.security import entry_toml, hash_token, new_token
from tests.conftest import LiveServer, start_server

TOKENS: dict[str, dict[str, Any]] = {
    "admin": {"admin": True},
    "producer": {"produce": ["Sec*"], "producer_groups": ["pg", "shared", "SecG*"]},
    "topic-only": {"produce": ["Sec*"]},  # no producer group: no transactions
    "consumer": {"consume": ["SecG*:Sec*"]},
    "everything-but-admin": {"produce": ["*"], "consume": ["*:*"], "producer_groups": ["*"]},
    "stranger": {
        "produce": ["Other*"],
        "consume": ["OtherG:Other*"],
        "producer_groups": ["shared", "OtherG*"],
    },
    "nobody": {},  # a valid token without any grant: metrics, docs
    "slow": {"produce": ["*"], "consume": ["*:*"], "rate_per_s": 0.001, "burst": 2},
    "parker": {"consume": ["*:*"], "max_parked_pulls": 1},
}
"""Name -> grants of the tokens every secured test server knows."""


def write_auth_file(path: Path, specs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Write an auth file for ``specs``; the fresh token of each name."""
    tokens = {name: new_token() for name in specs}
    path.write_text(
        "\n".join(
            entry_toml(name, hash_token(tokens[name]), **spec) for name, spec in specs.items()
        )
    )
    return tokens


@dataclass
class AuthServer:
    """A live server with an auth file; ``client(name)`` presents that token."""

    live: LiveServer
    tokens: dict[str, str]
    auth_file: Path

    @property
    def url(self) -> str:
        return self.live.url

    def headers(self, who: str | None) -> dict[str, str]:
        return {} if who is None else {"Authorization": f"Bearer {self.tokens[who]}"}

    def client(self, who: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {**self.headers(who), **kwargs.pop("headers", {})}
        return self.live.client(headers=headers, **kwargs)

    def stop(self) -> None:
        self.live.stop()


def start_auth_server(root: Path, **overrides: Any) -> AuthServer:
    root.mkdir(parents=True, exist_ok=True)
    auth_file = root / "auth.toml"
    tokens = write_auth_file(auth_file, TOKENS)
    live = start_server(root / "store", auth_file=auth_file, **overrides)
    return AuthServer(live, tokens, auth_file)
