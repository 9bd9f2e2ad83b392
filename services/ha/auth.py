"""The proof a slave gives on its master's HA port: an HMAC of the master's nonce, keyed by its
replication token (the wire format is in :mod:`services.ha.protocol`).

The key is the token's SHA-256, the digest a master's auth file keeps: the master checks a
proof without ever holding a token, and the token itself never crosses the network. Whoever
can read the auth file can prove itself on the HA port: keep that file readable by the
broker alone.

>>> key = replica_key("smq_example")
>>> nonce = bytes(32)
>>> check_proof(proof(key, nonce, "b"), nonce, "b", frozenset({key}))
True
>>> check_proof(proof(key, nonce, "b"), nonce, "c", frozenset({key}))
False
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Collection
from typing import Final

from services.ha.protocol import NONCE_BYTES

CONTEXT: Final = "spoolmq-ha/1 slave "
"""What a proof is for: a slave's HA connection (and the name it gave); no other exchange
can reuse it."""


def replica_key(token: str) -> bytes:
    """The key a token proves with: its SHA-256 (``bytes.fromhex`` of the auth file's entry)."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def proof(key: bytes, nonce: bytes, slave_name: str) -> bytes:
    """``HMAC-SHA256(key, nonce + CONTEXT + slave_name)``."""
    message = nonce + (CONTEXT + slave_name).encode()
    return hmac.new(key, message, hashlib.sha256).digest()


def check_proof(
    answer: bytes, nonce: bytes, slave_name: str, accepted_keys: Collection[bytes]
) -> bool:
    """Whether ``answer`` is the proof of one of ``accepted_keys`` (each compared in
    constant time, all of them every time)."""
    matched = False
    for key in accepted_keys:
        matched |= hmac.compare_digest(answer, proof(key, nonce, slave_name))
    return matched
