"""properties_column: many records' properties split at once equal the record decoder's."""

from __future__ import annotations

import random

import numpy as np
import pytest

from spark_jobs.arrays import as_bytes, offsets_of
from spark_jobs.properties_column import PropertiesColumns, properties_columns
from storage.record.properties import (
    decode_properties,
    encode_properties,
    shown_properties,
    split_keys,
)

NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "IDEMPOTENCY_KEY", "IDEMPOTENCY_FP", "IDEMPOTENCY_BATCH", "x"]
VALUES = ["a", "k1 k2", "  k3 ", "日本", "é", "v" * 70, "0"]


def columns_of(raw: list[bytes]) -> PropertiesColumns:
    values = as_bytes(b"".join(raw))
    offsets = offsets_of(np.array([len(r) for r in raw], dtype=np.int64))
    return properties_columns(values, offsets)


def expected(raw: list[bytes]) -> dict[str, list[object]]:
    decoded = [shown_properties(decode_properties(r)) for r in raw]
    return {
        "map": [list(d.items()) for d in decoded],
        "tags": [d.get("TAGS") for d in decoded],
        "keys": [split_keys(d.get("KEYS")) for d in decoded],
        "uniq_key": [d.get("UNIQ_KEY") for d in decoded],
    }


def as_lists(columns: PropertiesColumns) -> dict[str, list[object]]:
    return {
        "map": columns.map.to_pylist(),
        "tags": columns.tags.to_pylist(),
        "keys": columns.keys.to_pylist(),
        "uniq_key": columns.uniq_key.to_pylist(),
    }


def test_random_property_sets_equal_the_decoder() -> None:
    rng = random.Random(22)
    raw = []
    for _ in range(300):
        names = rng.sample(NAMES, rng.randint(0, len(NAMES)))
        raw.append(encode_properties({name: rng.choice(VALUES) for name in names}))
    assert as_lists(columns_of(raw)) == expected(raw)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param([b"A\x011\x02A\x012\x02"], id="a-name-twice"),
        pytest.param([b"TAGS\x01\xff\xfe\x02", b"KEYS\x01a\x02"], id="not-utf8"),
        pytest.param([b"", b"\x01v\x02A\x01\x02junk\x02B\x012"], id="empty-and-malformed"),
    ],
)
def test_batches_the_vectorised_split_does_not_cover_still_equal_the_decoder(
    raw: list[bytes],
) -> None:
    assert as_lists(columns_of(raw)) == expected(raw)


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param(b"", id="vectorised"),
        pytest.param(b"A\x011\x02A\x012\x02", id="record-by-record"),  # a name twice
    ],
)
def test_the_brokers_bookkeeping_never_reaches_the_map(extra: bytes) -> None:
    stamped = encode_properties(
        {"UNIQ_KEY": "U", "TAGS": "t", "IDEMPOTENCY_KEY": "re-put 0", "POP_CK": "T 0 1 ck"}
    )
    plain = encode_properties({"TRAN_DELAY": "3", "region": "eu", "TRAN_END": "COMMIT"})
    columns = as_lists(columns_of([stamped, plain + extra]))
    assert columns["map"][0] == [("UNIQ_KEY", "U"), ("TAGS", "t")]
    assert columns["map"][1] == [("region", "eu"), *([("A", "2")] if extra else [])]
    assert (columns["tags"], columns["uniq_key"]) == (["t", None], ["U", None])
