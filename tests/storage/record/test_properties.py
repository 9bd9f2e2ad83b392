"""properties: the PROPERTIES text both ways."""

from __future__ import annotations

import pytest

from storage.record.properties import (
    BOOKKEEPING_PROPERTIES,
    PROPERTY_IDEMPOTENCY_BATCH,
    PROPERTY_IDEMPOTENCY_FINGERPRINT,
    PROPERTY_IDEMPOTENCY_KEY,
    decode_properties,
    encode_properties,
    shown_properties,
    split_keys,
)
from tests.storage.record.golden import KEYS, PROPERTIES_BYTES


def test_encode_properties_uses_separators_with_trailing_separator() -> None:
    assert encode_properties({"TAGS": "TAG1", "KEYS": KEYS}) == PROPERTIES_BYTES
    assert encode_properties({}) == b""
    assert encode_properties({"K": "värde"}) == "K\x01värde\x02".encode()


PROPERTY_PARSES = [
    pytest.param(b"A\x011\x02B\x012\x02", {"A": "1", "B": "2"}, id="trailing-separator"),
    pytest.param(b"A\x011\x02B\x012", {"A": "1", "B": "2"}, id="no-trailing-separator"),
    pytest.param(b"\x01v\x02A\x011", {"A": "1"}, id="empty-name-dropped"),
    pytest.param(b"A\x01\x02B\x012", {"B": "2"}, id="empty-value-dropped"),
    pytest.param(b"junk\x02A\x011", {"A": "1"}, id="segment-without-separator-dropped"),
    pytest.param(b"A\x011\x02A\x012", {"A": "2"}, id="later-duplicate-wins"),
    pytest.param(b"", {}, id="empty"),
    pytest.param("K\x01värde", {"K": "värde"}, id="str-input"),
]


@pytest.mark.parametrize(("raw", "expected"), PROPERTY_PARSES)
def test_decode_properties(raw: bytes | str, expected: dict[str, str]) -> None:
    assert decode_properties(raw) == expected


def test_keys_split_on_spaces_and_empty_keys_are_dropped() -> None:
    assert split_keys("  k1   k2 ") == ["k1", "k2"]
    assert split_keys("   ") == split_keys("") == split_keys(None) == []


def test_the_idempotency_properties_travel_like_any_other() -> None:
    properties = {
        PROPERTY_IDEMPOTENCY_KEY: "order-17",
        PROPERTY_IDEMPOTENCY_FINGERPRINT: "9f86d081",
        PROPERTY_IDEMPOTENCY_BATCH: "3",
    }
    encoded = encode_properties(properties)
    assert encoded == (
        b"IDEMPOTENCY_KEY\x01order-17\x02IDEMPOTENCY_FP\x019f86d081\x02IDEMPOTENCY_BATCH\x013\x02"
    )
    assert decode_properties(encoded) == properties


def test_the_brokers_bookkeeping_is_left_out_of_what_a_reader_is_shown() -> None:
    names = ["IDEMPOTENCY_KEY", "IDEMPOTENCY_FP", "IDEMPOTENCY_BATCH", "POP_CK"]
    names += ["TRAN_END", "TRAN_DELAY", "TRAN_TIMER_DELAY_MS", "TRAN_TIMER_DELIVER_MS"]
    assert sorted(BOOKKEEPING_PROPERTIES) == sorted(names)
    plain = {"UNIQ_KEY": "U", "TAGS": "t", "PGROUP": "pg", "__transactionId__": "U"}
    assert shown_properties(plain) is plain  # nothing to leave out: no copy
    stamped = {**plain, "IDEMPOTENCY_KEY": "re-put 0", "POP_CK": "T 0 1 ck", "TRAN_DELAY": "3"}
    assert shown_properties(stamped) == plain
    assert "IDEMPOTENCY_KEY" in stamped  # the record's own properties are left as they are
