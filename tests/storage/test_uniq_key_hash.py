"""The IndexFile hash of a uniq key, computed from a remembered head, equals the plain one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.send import UniqKeyGenerator
from storage.index_file import KeyHasher, UniqKeyHasher, index_key_hash


@given(topic=st.text(min_size=1, max_size=20), key=st.text(max_size=60))
def test_any_key_hashes_as_the_whole_string(topic: str, key: str) -> None:
    assert UniqKeyHasher()(topic, key) == index_key_hash(f"{topic}#{key}")


def test_generated_keys_hash_as_the_whole_string() -> None:
    hasher = UniqKeyHasher()
    keys = UniqKeyGenerator("10.0.0.7").next_many(2000)
    for topic in ("TopicA", "%RETRY%group", "Topic-é"):
        for key in keys:
            assert hasher(topic, key) == index_key_hash(f"{topic}#{key}")


@given(topic=st.text(min_size=1, max_size=20), key=st.text(max_size=60))
def test_a_business_key_hashes_as_the_whole_string(topic: str, key: str) -> None:
    hasher = KeyHasher()
    assert hasher(topic, key) == index_key_hash(f"{topic}#{key}")
    assert hasher(topic, key + "x") == index_key_hash(f"{topic}#{key}x")  # prefix remembered


def test_long_and_wide_business_keys_hash_as_the_whole_string() -> None:
    hasher = KeyHasher()
    for key in ("k" * 1024, "k" * 1025, "é" * 700, "日本" * 3, "\U0001f600x", "key-0000000001"):
        assert hasher("TopicA", key) == index_key_hash(f"TopicA#{key}")
