"""properties: a re-send keeps the user's properties and drops the broker's own."""

from __future__ import annotations

from spark_jobs.properties import SYSTEM_PROPERTIES, sendable_properties
from storage.record.properties import (
    PROPERTY_IDEMPOTENCY_BATCH,
    PROPERTY_IDEMPOTENCY_FINGERPRINT,
    PROPERTY_IDEMPOTENCY_KEY,
)


def test_system_and_idempotency_names_go_uncounted_and_unsendable_ones_are_counted() -> None:
    stored = {
        "TAGS": "a",
        "UNIQ_KEY": "U",
        PROPERTY_IDEMPOTENCY_KEY: "k",
        PROPERTY_IDEMPOTENCY_FINGERPRINT: "f",
        PROPERTY_IDEMPOTENCY_BATCH: "2",
        "region": "eu",
        "note": "a\x01b",
        "empty": "",
    }
    assert sendable_properties(stored) == ({"region": "eu"}, 2)
    assert sendable_properties({"TAGS": "a"}, system=frozenset()) == ({"TAGS": "a"}, 0)
    assert {"KEYS", "DELAY", "ORIGIN_MESSAGE_ID", "TIMER_OUT_MS"} <= SYSTEM_PROPERTIES
