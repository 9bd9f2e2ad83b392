"""Receipt handles: self-contained, tamper-evident names of one delivery.

A handle carries everything needed to find its checkpoint (group, topic, queue, offset, CK id)
and its deadline, as RocketMQ's ``extraInfo`` does, so the broker keeps no per-handle table.
It is ``<payload>.<mac>``: the six fields joined by spaces (no group or topic name has one),
base64url, and an HMAC-SHA256 (first 16 bytes) over it with a per-store secret kept in
``config/pop.secret``. A forged or mangled handle fails the check.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from services.errors import InvalidReceiptHandleError

SECRET_FILE: Final = "pop.secret"
MAX_HANDLE_LENGTH: Final = 1024
_MAC_BYTES: Final = 16


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """One delivery of one message to one receiver."""

    group: str
    topic: str
    queue_id: int
    offset: int
    ck_id: str
    deadline_ms: int


class HandleCodec:
    """Signs and checks receipt handles with the store's secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def for_config_dir(cls, config_dir: Path) -> HandleCodec:
        """The codec of a store: its secret is created once, on first use, and kept."""
        return cls(_load_or_create_secret(config_dir / SECRET_FILE))

    def encode(self, handle: ReceiptHandle) -> str:
        text = (
            f"{handle.group} {handle.topic} {handle.queue_id} {handle.offset} "
            f"{handle.ck_id} {handle.deadline_ms}"
        )
        payload = _b64(text.encode())
        return f"{payload}.{_b64(self._mac(payload))}"

    def decode(self, text: str) -> ReceiptHandle:
        """The handle ``text`` names; InvalidReceiptHandleError when it is not genuine."""
        if not isinstance(text, str) or not 0 < len(text) <= MAX_HANDLE_LENGTH:
            raise InvalidReceiptHandleError("a receipt handle is 1 to 1024 characters")
        payload, _, mac = text.partition(".")
        try:
            genuine = hmac.compare_digest(_unb64(mac), self._mac(payload))
        except (ValueError, binascii.Error):
            genuine = False
        if not genuine:
            raise InvalidReceiptHandleError("the receipt handle is not one this store issued")
        try:
            group, topic, queue_id, offset, ck_id, deadline_ms = _unb64(payload).decode().split(" ")
            return ReceiptHandle(group, topic, int(queue_id), int(offset), ck_id, int(deadline_ms))
        except (ValueError, UnicodeDecodeError, binascii.Error):
            raise InvalidReceiptHandleError("the receipt handle is malformed") from None

    def _mac(self, payload: str) -> bytes:
        return hmac.digest(self._secret, payload.encode(), "sha256")[:_MAC_BYTES]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def secret_text(config_dir: Path) -> str | None:
    """The store's secret as kept on disk (hex), for a slave to copy; None when not made yet."""
    try:
        return (config_dir / SECRET_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def adopt_secret(config_dir: Path, text: str) -> None:
    """Keep the master's secret (hex), so handles it issued stay valid after a failover."""
    bytes.fromhex(text)  # ValueError when it is not hex
    path = config_dir / SECRET_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)


def _load_or_create_secret(path: Path) -> bytes:
    """Read the secret; create it (32 random bytes, hex, mode 0600, fsynced) when absent."""
    try:
        text = path.read_text().strip()
        if len(text) >= 32:
            return bytes.fromhex(text)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    secret = secrets.token_bytes(32)
    try:
        os.write(fd, secret.hex().encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    tmp.replace(path)
    return secret
