"""index_file: entries up to the file's limit, the key hash (a uniq key's from a remembered
head equals the plain one), batched puts."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.uniq_keys import UniqKeyGenerator
from storage.index_file import IndexFile, KeyHasher, UniqKeyHasher, index_key_hash
from storage.record.java_hash import java_string_hash


@given(topic=st.text(min_size=1, max_size=20), key=st.text(max_size=60))
def test_any_key_hashes_as_the_whole_string(topic: str, key: str) -> None:
    assert UniqKeyHasher()(topic, key) == index_key_hash(f"{topic}#{key}")


def test_generated_keys_hash_as_the_whole_string() -> None:
    hasher = UniqKeyHasher()
    keys = UniqKeyGenerator("10.0.0.7").next_many(2000)
    for topic in ("TopicA", "%RETRY%group", "Topic-é"):
        for key in keys:
            assert hasher(topic, key) == index_key_hash(f"{topic}#{key}")


@given(
    topic=st.text(min_size=1, max_size=20),
    keys=st.lists(
        st.one_of(st.text(max_size=8), st.sampled_from(["AB0001", "AB0002", "ABé003", "CD0001"])),
        max_size=12,
    ),
)
def test_a_batch_of_keys_hashes_as_each_whole_string(topic: str, keys: list[str]) -> None:
    generated = UniqKeyGenerator("10.0.0.7").next_many(3)
    keys = [*keys, *generated, *keys]
    assert UniqKeyHasher().many(topic, keys) == [index_key_hash(f"{topic}#{k}") for k in keys]


ASCII = st.text(st.characters(min_codepoint=0, max_codepoint=127), min_size=4, max_size=4)


@given(
    topic=st.text(min_size=1, max_size=20),
    head=st.text(st.characters(min_codepoint=0, max_codepoint=127), min_size=1, max_size=28),
    tails=st.lists(ASCII, min_size=1, max_size=12),
)
def test_a_batch_of_one_ascii_head_hashes_as_each_whole_string(
    topic: str, head: str, tails: list[str]
) -> None:
    keys = [head + tail for tail in tails]  # one send's keys: the mapped C calls
    assert UniqKeyHasher().many(topic, keys) == [index_key_hash(f"{topic}#{k}") for k in keys]


def test_generated_batches_hash_as_each_whole_string() -> None:
    generator = UniqKeyGenerator("10.0.0.7")
    hasher = UniqKeyHasher()
    for topic in ("TopicA", "%RETRY%group", "Topic-é"):
        for count in (1, 2, 1000):
            keys = generator.next_many(count)
            assert hasher.many(topic, keys) == [index_key_hash(f"{topic}#{k}") for k in keys]


def test_a_key_hashing_to_java_min_value_gets_0_in_a_batch() -> None:
    assert java_string_hash("T#K1389p^uh") == -(2**31)
    keys = ["K1389p^uh", "K1389AAAA", "K1389p^uh"]
    assert UniqKeyHasher().many("T", keys) == [0, index_key_hash("T#K1389AAAA"), 0]


@given(topic=st.text(min_size=1, max_size=20), key=st.text(max_size=60))
def test_a_business_key_hashes_as_the_whole_string(topic: str, key: str) -> None:
    hasher = KeyHasher()
    assert hasher(topic, key) == index_key_hash(f"{topic}#{key}")
    assert hasher(topic, key + "x") == index_key_hash(f"{topic}#{key}x")  # prefix remembered


def test_long_and_wide_business_keys_hash_as_the_whole_string() -> None:
    hasher = KeyHasher()
    for key in ("k" * 1024, "k" * 1025, "é" * 700, "日本" * 3, "\U0001f600x", "key-0000000001"):
        assert hasher("TopicA", key) == index_key_hash(f"TopicA#{key}")


def test_index_file_takes_max_minus_one_entries(tmp_path: Path) -> None:
    index = IndexFile(tmp_path / "20261121000000000", 100, 400, create=True)
    now = int(time.time() * 1000)
    accepted = [index.put(str(i), i * 100, now) for i in range(400)]
    assert accepted == [True] * 399 + [False]
    assert index.select_phy_offsets("60", 10, 0, now + 1) == [6000]
    index.close()
    reopened = IndexFile(tmp_path / "20261121000000000", 100, 400)
    assert reopened.index_count == 400
    assert reopened.select_phy_offsets("398", 10, 0, now + 1) == [39800]
    reopened.close()


def test_index_key_hash_is_abs_of_the_java_hash() -> None:
    assert index_key_hash("TAG1") == 2567159
    assert index_key_hash("polygenelubricants") == 0  # Java hashCode is Integer.MIN_VALUE
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert index_key_hash("a" * 7) == abs(java_string_hash("a" * 7))


def test_put_hashes_writes_what_put_hash_writes_and_stops_when_full(tmp_path: Path) -> None:
    one_by_one = IndexFile(tmp_path / "20261121000000000", 7, 30, create=True)
    batched = IndexFile(tmp_path / "20261121000000001", 7, 30, create=True)
    now = 1_700_000_000_000
    entries = [(index_key_hash(f"T#k{i % 11}"), 100 * i) for i in range(40)]
    accepted = sum(one_by_one.put_hash(h, offset, now + 5000) for h, offset in entries)
    assert batched.put_hashes(entries[:10], now + 5000) == 10
    assert batched.put_hashes([], now + 5000) == 0
    assert batched.put_hashes(entries[10:], now + 5000) == accepted - 10 == 19
    assert batched.put_hashes(entries[29:], now + 5000) == 0
    one_by_one.close()
    batched.close()
    first = (tmp_path / "20261121000000000").read_bytes()
    assert (tmp_path / "20261121000000001").read_bytes() == first


@settings(max_examples=150, deadline=None)
@given(
    slots=st.sampled_from([3, 1000]),
    garbage=st.lists(st.integers(-5, 40), max_size=8),
    before=st.lists(st.integers(0, 2**31 - 1), max_size=6),
    batch=st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 2**40)), max_size=12),
)
def test_a_batch_of_entries_writes_what_one_entry_at_a_time_writes(
    tmp_path_factory: pytest.TempPathFactory,
    slots: int,
    garbage: list[int],
    before: list[int],
    batch: list[tuple[int, int]],
) -> None:
    """With a slot per entry (mapped) or slots shared (looped); over slots left with any
    value (a damaged file)."""
    root = tmp_path_factory.mktemp("index")
    files = [IndexFile(root / f"2026112100000000{n}", slots, 14, create=True) for n in (0, 1)]
    now = 1_700_000_000_000
    for index in files:
        for number, value in enumerate(garbage):
            index.buffer[40 + 4 * (number % slots) : 44 + 4 * (number % slots)] = value.to_bytes(
                4, "big", signed=True
            )
        for number, key_hash in enumerate(before):
            index.put_hash(key_hash, number, now)
    one_by_one, batched = files
    accepted = sum(one_by_one.put_hash(h, offset, now + 5000) for h, offset in batch)
    assert batched.put_hashes(batch, now + 5000) == accepted
    for index in files:
        index.close()
    assert (root / "20261121000000000").read_bytes() == (root / "20261121000000001").read_bytes()


def test_an_older_store_time_does_not_move_the_end_back(tmp_path: Path) -> None:
    """A committed transaction keeps its half's store time: the file's time range stays
    whole, so keys stored before it are still found."""
    index = IndexFile(tmp_path / "20261121000000000", 100, 400, create=True)
    now = int(time.time() * 1000)
    index.put("new", 100, now)
    index.put("committed", 200, now - 60_000)
    index.put_hashes([(index_key_hash("batch"), 300)], now - 120_000)
    assert index.end_timestamp == now
    assert index.select_phy_offsets("new", 10, now, now + 1) == [100]
    index.close()
