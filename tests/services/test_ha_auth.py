"""The proof a slave gives on its master's HA port (the exchange itself: test_ha_master.py)."""

from __future__ import annotations

import hashlib

from services.ha.auth import check_proof, new_nonce, proof, replica_key

TOKEN = "smq_replication-token"


def test_the_key_is_what_the_auth_file_holds() -> None:
    assert replica_key(TOKEN).hex() == hashlib.sha256(TOKEN.encode()).hexdigest()


def test_a_proof_holds_for_its_nonce_name_and_key_only() -> None:
    key, nonce = replica_key(TOKEN), new_nonce()
    answer = proof(key, nonce, "b")
    others = frozenset({replica_key("smq_other")})
    assert check_proof(answer, nonce, "b", others | {key})
    assert not check_proof(answer, nonce, "b", others)
    assert not check_proof(answer, nonce, "c", {key})  # another slave's name
    assert not check_proof(answer, new_nonce(), "b", {key})  # replayed on another connection
    assert not check_proof(answer, nonce, "b", ())  # an auth file without admin tokens
    assert TOKEN.encode() not in answer and key not in answer
