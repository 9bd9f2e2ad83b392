"""Records sent with an idempotency key: indexed apart from business keys, found by key and
store time, rebuilt from the CommitLog after an unclean exit."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from storage import Message, MessageStore, StoreConfig
from storage.index_file import index_key_hash
from storage.index_service import idempotency_index_key, idempotency_key_hash
from storage.record.properties import (
    PROPERTY_IDEMPOTENCY_BATCH,
    PROPERTY_IDEMPOTENCY_KEY,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_KEY,
)


def config(**overrides: object) -> StoreConfig:
    values: dict[str, object] = {
        "commit_log_file_size": 64 * 1024,
        "consume_queue_units_per_file": 50,
        "max_hash_slot_num": 100,
        "max_index_num": 400,
        "message_delay_levels": "1s 2s",
    }
    values.update(overrides)
    return StoreConfig(**values)  # type: ignore[arg-type]


def keyed(topic: str, body: bytes, key: str, **properties: str) -> Message:
    return Message(topic, body, properties={PROPERTY_IDEMPOTENCY_KEY: key, **properties})


def test_an_idempotency_key_never_meets_a_business_key(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config()) as store:
        business = store.put(
            [Message("T", b"business", properties={PROPERTY_KEYS: "k-1", PROPERTY_UNIQ_KEY: "k-1"})]
        )[0]
        sent = store.put([keyed("T", b"keyed", "k-1")])[0]
        found = store.keyed.find("T", "k-1", 0)
        assert found is not None and found.physical_offset == sent.physical_offset
        assert [m.physical_offset for m in store.query_message("T", "k-1")] == [
            business.physical_offset
        ]
        assert store.keyed.find("Other", "k-1", 0) is None  # keys are per topic


def test_a_key_is_found_inside_its_window_only(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config()) as store:
        sent = store.put([keyed("T", b"x", "window")])[0]
        assert store.keyed.find("T", "window", sent.store_timestamp) is not None
        assert store.keyed.find("T", "window", sent.store_timestamp + 1) is None


def test_a_batch_is_read_back_from_its_first_record(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config()) as store:
        store.put([Message("T", b"before")])
        batch = [keyed("T", b"b0", "batch", **{PROPERTY_IDEMPOTENCY_BATCH: "3"})]
        batch += [Message("T", body) for body in (b"b1", b"b2")]
        results = store.put(batch)
        store.put([Message("T", b"after")])
        first = store.keyed.find("T", "batch", 0)
        assert first is not None
        records = store.keyed.read_from(first, 3)
        assert [r.physical_offset for r in records] == [r.physical_offset for r in results]
        assert [r.body for r in records] == [b"b0", b"b1", b"b2"]


def test_a_delayed_record_is_found_in_the_topic_it_was_sent_to(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config()) as store:
        sent = store.put([keyed("Orders", b"later", "delayed", DELAY="1")])[0]
        assert sent.topic == "SCHEDULE_TOPIC_XXXX"
        found = store.keyed.find("Orders", "delayed", 0)
        assert found is not None and found.physical_offset == sent.physical_offset
        assert store.keyed.find("SCHEDULE_TOPIC_XXXX", "delayed", 0) is None


def test_after_an_unclean_exit_the_index_covers_the_log_once_caught_up(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config(max_index_num=2000)) as store:
        for i in range(150):
            store.put([keyed("T", str(i).encode(), f"key-{i}")])
        end = store.max_physical_offset
    (tmp_path / "abort").touch()
    with MessageStore.open(
        tmp_path, config(max_index_num=2000, index_catch_up_on_open=False)
    ) as store:
        assert not store.keyed.covers(end)
        assert store.keyed.find("T", "key-140", 0) is None  # not indexed yet
        while not store.catch_up_index(max_records=40):
            pass
        assert store.keyed.covers(end)
        found = store.keyed.find("T", "key-140", int(time.time() * 1000) - 60_000)
        assert found is not None and found.body == b"140"


@pytest.mark.parametrize(
    ("scope", "key"),
    [("T", "k-1"), ("Orders", "re-put 4096"), ("%RETRY%g", "~" * 128), ("T", "")],
)
def test_the_index_hash_of_a_key_is_that_of_its_index_key(scope: str, key: str) -> None:
    assert idempotency_key_hash(scope, key) == index_key_hash(idempotency_index_key(scope, key))
