"""MessageStore: put, batches, every GetMessageStatus of reference §10.3, lookups, listener,
reopen, and bad input that must leave the store untouched."""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

import storage.message_store
from storage import (
    GetMessageResult,
    GetMessageStatus,
    MessageStore,
    PutResult,
    TagFilter,
)
from storage.errors import (
    InvalidTopicError,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    QueueIdOutOfRangeError,
    StoreClosedError,
    StoreLoadError,
    StoreLockedError,
)
from storage.mapped_file import offset_to_file_name
from storage.record.fields import NamedView
from storage.record.java_hash import java_string_hash
from storage.record.layout import (
    CQ_UNIT_STRUCT,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
)
from storage.record.message import Message, UniformMessages
from storage.record.msg_id import encode_msg_id
from storage.sql92 import Sql92Filter
from tests.storage.conftest import (
    COMMIT_LOG_FILE_SIZE,
    MAX_QUEUES,
    TINY_CONFIG,
    OpenStore,
    message,
)

S = GetMessageStatus


def get(
    store: MessageStore,
    offset: int,
    topic: str = "TopicA",
    queue_id: int = 0,
    max_messages: int = 32,
    max_bytes: int | None = None,
    tags: str | None = None,
) -> GetMessageResult:
    return store.get_message(
        "group",
        topic,
        queue_id,
        offset,
        max_messages,
        max_bytes,
        TagFilter(tags) if tags is not None else None,
    )


def summary(result: GetMessageResult) -> tuple[S, int, int, int]:
    return (result.status, result.next_begin_offset, result.min_offset, result.max_offset)


def put_n(
    store: MessageStore, n: int, topic: str = "TopicA", queue_id: int = 0, size: int = 100
) -> list[PutResult]:
    return [store.put([message(topic, b"%d:" % i + b"x" * size, queue_id)])[0] for i in range(n)]


# ---------------------------------------------------------------- put


def test_put_message_returns_where_it_went(store: MessageStore) -> None:
    first = store.put([message(body=b"one", tags="TagA", keys="k1 k2")])[0]
    second = store.put([message(body=b"two")])[0]
    assert (first.topic, first.queue_id, first.queue_offset, first.physical_offset) == (
        "TopicA",
        0,
        0,
        0,
    )
    assert second.queue_offset == 1
    assert second.physical_offset == first.end_offset
    assert first.msg_id == encode_msg_id("127.0.0.1", 10911, 0)
    assert len(first.msg_id) == 32
    assert first.store_timestamp > 0
    result = get(store, 0)
    assert summary(result) == (S.FOUND, 2, 0, 2)
    one, two = result.messages
    assert (one.body, one.tags, one.keys, one.queue_offset) == (b"one", "TagA", ["k1", "k2"], 0)
    assert (two.body, two.tags, two.queue_offset) == (b"two", None, 1)
    assert one.msg_id == first.msg_id


def test_messages_span_many_files_of_both_kinds(store: MessageStore) -> None:
    results = put_n(store, 45, size=300)
    assert len(store.commit_log.queue.files) >= 4
    queue = store.find_consume_queue("TopicA", 0)
    assert queue is not None
    assert len(queue.queue.files) == 5
    offset, bodies = 0, list[bytes]()
    while True:
        result = get(store, offset)
        if result.status is not S.FOUND:
            assert summary(result) == (S.OFFSET_OVERFLOW_ONE, 45, 0, 45)
            break
        bodies.extend(m.body for m in result.messages)
        offset = result.next_begin_offset
    assert bodies == [b"%d:" % i + b"x" * 300 for i in range(45)]
    assert [r.queue_offset for r in results] == list(range(45))


def test_queues_are_independent(store: MessageStore) -> None:
    for i in range(6):
        store.put([message("TopicA", b"a%d" % i, queue_id=i % 2)])
        store.put([message("TopicB", b"b%d" % i, queue_id=0)])
    assert [m.body for m in get(store, 0, queue_id=0).messages] == [b"a0", b"a2", b"a4"]
    assert [m.body for m in get(store, 0, queue_id=1).messages] == [b"a1", b"a3", b"a5"]
    assert [m.body for m in get(store, 0, topic="TopicB").messages] == [
        b"b%d" % i for i in range(6)
    ]
    assert store.topics() == ["TopicA", "TopicB"]
    assert store.queue_ids("TopicA") == [0, 1]
    assert store.max_offset_in_queue("TopicA", 1) == 3
    assert store.max_offset_in_queue("Nope", 0) == 0


def test_put_messages_gets_consecutive_queue_offsets(store: MessageStore) -> None:
    store.put([message(body=b"before")])
    batch = [message(body=b"b%d" % i, tags="TagA") for i in range(5)]
    results = store.put(batch)
    assert [r.queue_offset for r in results] == [1, 2, 3, 4, 5]
    assert [r.physical_offset for r in results[1:]] == [r.end_offset for r in results[:-1]]
    assert len({r.msg_id for r in results}) == 5
    assert [m.body for m in get(store, 1).messages] == [b"b%d" % i for i in range(5)]
    assert len(store.put([])) == 0


class _StoppedClock:
    """The ``time`` module with ``time_ns`` stopped: two stores stamp the same times."""

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)

    @staticmethod
    def time_ns() -> int:
        return 1_700_000_000_123_000_000


@pytest.mark.parametrize(
    ("first", "bodies"),
    [
        pytest.param(Message("TopicA", b"a", 1, {"UNIQ_KEY": "K0"}), [b"b", b"cc"], id="lean"),
        pytest.param(
            Message("TopicA", b"a", 0, {"UNIQ_KEY": "K0"}, born_host=("::1", 7)),
            [b"b"],
            id="ipv6-born-host",
        ),
        pytest.param(Message("TopicA", b"a", 0, {"UNIQ_KEY": "K0"}), [b"x" * 5000], id="huge"),
        pytest.param(Message("bad topic", b"a", 0, {"UNIQ_KEY": "K0"}), [b"b"], id="bad-topic"),
        pytest.param(Message("TopicA", b"a", MAX_QUEUES, {"UNIQ_KEY": "K0"}), [b"b"], id="queue"),
        pytest.param(
            Message("TopicA", b"a", 0, {"UNIQ_KEY": "K0", "TAGS": "T"}), [b"b"], id="tagged-first"
        ),
    ],
)
def test_uniform_messages_are_stored_and_answered_as_the_same_messages_listed(
    open_store: OpenStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    first: Message,
    bodies: list[bytes],
) -> None:
    monkeypatch.setattr(storage.message_store, "time", _StoppedClock())
    by_messages, by_columns = open_store(root=tmp_path / "a"), open_store(root=tmp_path / "b")
    keys = ["K0", *(f"K{i + 1}" for i in range(len(bodies)))]
    messages = [first] + [
        Message(first.topic, body, first.queue_id, {"UNIQ_KEY": key}, 0, 0, 0, first.born_host)
        for body, key in zip(bodies, keys[1:], strict=True)
    ]
    for store in (by_messages, by_columns):  # not the first put of either
        store.put([message(body=b"before")])
    try:
        expected: object = by_messages.put(messages).results()
    except Exception as exc:
        expected = (type(exc), str(exc))
    try:
        found: object = by_columns.put(
            UniformMessages(first, [first.body, *bodies], keys)
        ).results()
    except Exception as exc:
        found = (type(exc), str(exc))
    assert found == expected
    files = [
        b"".join(p.read_bytes() for p in sorted((root / "commitlog").iterdir()))
        for root in (tmp_path / "a", tmp_path / "b")
    ]
    assert files[0] == files[1]


def test_batch_never_straddles_commit_log_files(store: MessageStore) -> None:
    store.put([message(body=b"x" * 3000)])
    results = store.put([message(body=b"y" * 300) for _ in range(4)])
    assert results[0].physical_offset == COMMIT_LOG_FILE_SIZE
    assert all(
        r.physical_offset // COMMIT_LOG_FILE_SIZE == 1 and r.end_offset <= 2 * COMMIT_LOG_FILE_SIZE
        for r in results
    )


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param([message("TopicA"), message("TopicB")], id="mixed-topics"),
        pytest.param([message("TopicA", queue_id=0), message("TopicA", queue_id=1)], id="queues"),
    ],
)
def test_put_messages_rejects_mixed_batches_and_writes_nothing(
    store: MessageStore, batch: list[Message]
) -> None:
    store.put([message(body=b"before")])
    before = store.commit_log.max_offset
    with pytest.raises(MessageRejectedError):
        store.put(batch)
    assert store.commit_log.max_offset == before
    assert store.max_offset_in_queue("TopicA", 0) == 1
    assert store.find_consume_queue("TopicB", 0) is None
    assert store.find_consume_queue("TopicA", 1) is None


@pytest.mark.parametrize(
    "sys_flag",
    [
        pytest.param(TRANSACTION_PREPARED_TYPE, id="prepared"),
        pytest.param(TRANSACTION_COMMIT_TYPE, id="commit"),
        pytest.param(TRANSACTION_ROLLBACK_TYPE, id="rollback"),
    ],
)
def test_put_messages_rejects_transactional_messages(store: MessageStore, sys_flag: int) -> None:
    """Reference §2.9: batches may not be transactional (RocketMQ answers MESSAGE_ILLEGAL).

    Accepted, a prepared message would take a queue offset it is never dispatched to,
    leaving a hole in the ConsumeQueue.
    """
    batch = [message(body=b"a"), Message("TopicA", b"b", sys_flag=sys_flag), message(body=b"c")]
    with pytest.raises(MessageRejectedError):
        store.put(batch)
    _assert_nothing_written(store, 0)


def test_put_messages_with_a_malformed_delay_is_rejected(store: MessageStore) -> None:
    with pytest.raises(MessageRejectedError):
        store.put([message(DELAY="soon")])
    _assert_nothing_written(store, 0)


def test_put_message_with_properties_that_are_not_unicode_writes_nothing(
    store: MessageStore,
) -> None:
    with pytest.raises(MessageRejectedError):
        store.put([message(tags="\ud800")])
    with pytest.raises(MessageRejectedError):
        store.put([message(), message(keys="k\udc00")])
    _assert_nothing_written(store, 0)


def test_put_messages_with_one_bad_message_writes_nothing(store: MessageStore) -> None:
    batch = [message(body=b"ok"), message(body=b"ok", tags="t" * 40_000)]
    with pytest.raises(PropertiesTooLargeError):
        store.put(batch)
    assert store.commit_log.max_offset == 0
    assert store.topics() == []


# ---------------------------------------------------------------- GetMessageStatus


def test_no_matched_logic_queue(store: MessageStore) -> None:
    put_n(store, 3)
    assert summary(get(store, 0, topic="Unknown")) == (S.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    assert summary(get(store, 5, queue_id=1)) == (S.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)


@pytest.mark.parametrize("offset", [pytest.param(0, id="offset-0"), pytest.param(7, id="offset-7")])
def test_no_message_in_queue(store: MessageStore, offset: int) -> None:
    store.find_consume_queue("TopicA", 2, create=True)  # an existing, empty queue
    assert summary(get(store, offset, queue_id=2)) == (S.NO_MESSAGE_IN_QUEUE, 0, 0, 0)


def test_found_and_next_begin_offset(store: MessageStore) -> None:
    put_n(store, 5)
    result = get(store, 1, max_messages=3)
    assert summary(result) == (S.FOUND, 4, 0, 5)
    assert [m.queue_offset for m in result.messages] == [1, 2, 3]


def test_offset_overflow_one(store: MessageStore) -> None:
    put_n(store, 5)
    result = get(store, 5)
    assert summary(result) == (S.OFFSET_OVERFLOW_ONE, 5, 0, 5)
    assert result.messages == []


def test_offset_overflow_badly_with_min_zero_goes_to_min(store: MessageStore) -> None:
    put_n(store, 5)
    assert summary(get(store, 6)) == (S.OFFSET_OVERFLOW_BADLY, 0, 0, 5)
    assert summary(get(store, 10**12)) == (S.OFFSET_OVERFLOW_BADLY, 0, 0, 5)


def test_negative_offset_is_too_small(store: MessageStore) -> None:
    put_n(store, 2)
    assert summary(get(store, -1)) == (S.OFFSET_TOO_SMALL, 0, 0, 2)


def test_no_matched_message_counts_filtered_units(store: MessageStore) -> None:
    for i in range(6):
        store.put([message(body=b"%d" % i, tags="TagA" if i < 5 else "TagB")])
    result = get(store, 0, tags="TagC")
    assert summary(result) == (S.NO_MATCHED_MESSAGE, 6, 0, 6)
    assert result.messages == []
    # Untagged messages (tags code 0) never match a tag subscription.
    store.put([message(body=b"untagged")])
    assert summary(get(store, 6, tags="TagA")) == (S.NO_MATCHED_MESSAGE, 7, 0, 7)


def test_tag_filter_selects_and_skipped_units_count_towards_next(store: MessageStore) -> None:
    tags = ["TagA", "TagB", None, "TagC", "TagA", "TagB", "TagD"]
    for i, tag in enumerate(tags):
        store.put([message(body=b"%d" % i, tags=tag)])
    result = get(store, 0, tags="TagA || TagC")
    assert result.status is S.FOUND
    assert [m.queue_offset for m in result.messages] == [0, 3, 4]
    assert result.next_begin_offset == 7
    capped = get(store, 0, tags="TagA||TagC", max_messages=2)
    assert [m.queue_offset for m in capped.messages] == [0, 3]
    assert capped.next_begin_offset == 4  # the unit that did not fit is not consumed
    assert [m.queue_offset for m in get(store, 0, tags="*").messages] == list(range(7))


def test_property_filter_skips_records_and_counts_them_towards_next(store: MessageStore) -> None:
    regions = ["eu", "us", "eu", "ap", "us", "eu"]
    for i, region in enumerate(regions):
        store.put([message(body=b"%d" % i, tags="TagA" if i % 2 else "TagB", region=region)])
    sql = Sql92Filter("region = 'eu' OR TAGS = 'TagA'")
    for views in (False, True):
        result = store.get_message(
            "group", "TopicA", 0, 0, 32, views=views, property_filter=sql.matches
        )
        found = [NamedView._make(v) for v in result.views] if views else result.messages
        assert result.status is S.FOUND
        assert [m.queue_offset for m in found] == [0, 1, 2, 3, 5]
        assert result.next_begin_offset == 6
    capped = store.get_message("group", "TopicA", 0, 1, 2, property_filter=sql.matches)
    assert [m.queue_offset for m in capped.messages] == [1, 2]
    assert capped.next_begin_offset == 3
    none = store.get_message("group", "TopicA", 0, 0, 32, property_filter=lambda p: False)
    assert summary(none) == (S.NO_MATCHED_MESSAGE, 6, 0, 6)
    both = store.get_message(
        "group", "TopicA", 0, 0, 32, tag_filter=TagFilter("TagB"), property_filter=sql.matches
    )
    assert [m.queue_offset for m in both.messages] == [0, 2]  # the tag first, then the SQL


@pytest.mark.parametrize("expression", [None, "", "*"])
def test_tag_filter_of_none_empty_or_star_matches_everything(expression: str | None) -> None:
    tag_filter = TagFilter(expression)
    assert tag_filter.matches_all
    assert tag_filter.matches_code(0)
    assert tag_filter.matches_code(java_string_hash("TagA"))
    assert tag_filter.matches_tags(None)


def test_tag_filter_trims_tags_and_ignores_empty_pieces() -> None:
    tag_filter = TagFilter(" TagA ||TagB|| ")
    assert not tag_filter.matches_all
    assert tag_filter.tags == frozenset({"TagA", "TagB"})
    assert tag_filter.matches_code(java_string_hash("TagA"))
    assert not tag_filter.matches_code(0)
    assert tag_filter.matches_tags("TagB")
    assert not tag_filter.matches_tags(None)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("||", id="bars"),
        pytest.param(" ", id="blank"),
        pytest.param(" || ", id="blank-pieces"),
        pytest.param("||||", id="only-separators"),
    ],
)
def test_tag_filter_with_no_tag_left_matches_nothing(store: MessageStore, expression: str) -> None:
    # RocketMQ's FilterAPI: only null, "" and "*" mean all; otherwise the trimmed, non-empty
    # pieces are the tags, and an empty tag set matches no message (reference §10.5).
    tag_filter = TagFilter(expression)
    assert not tag_filter.matches_all
    assert tag_filter.tags == frozenset()
    assert not tag_filter.matches_code(0)
    assert not tag_filter.matches_tags(None)
    assert not tag_filter.matches_tags("")
    store.put([message(body=b"untagged")])
    store.put([message(body=b"tagged", tags="TagA")])
    result = get(store, 0, tags=expression)
    assert summary(result) == (S.NO_MATCHED_MESSAGE, 2, 0, 2)
    assert result.messages == []


def test_tag_filter_compares_the_low_32_bits_of_the_tags_code() -> None:
    negative = java_string_hash("Hello World")
    assert negative < 0
    tag_filter = TagFilter("Hello World")
    assert tag_filter.matches_code(negative)
    assert tag_filter.matches_code(negative & 0xFFFFFFFF)  # a zero-extended reading


def test_tag_filter_is_by_hash_code_so_collisions_pass_the_store(store: MessageStore) -> None:
    # "Aa" and "BB" have the same Java hash (2112): the store filters by code, as RocketMQ's
    # broker does; the exact re-check (matches_tags) is the reader's.
    assert java_string_hash("Aa") == java_string_hash("BB")
    for tag in ["Aa", "BB", "Cc"]:
        store.put([message(body=tag.encode(), tags=tag)])
    result = get(store, 0, tags="Aa")
    assert [m.tags for m in result.messages] == ["Aa", "BB"]
    tag_filter = TagFilter("Aa")
    assert [m.tags for m in result.messages if tag_filter.matches_tags(m.tags)] == ["Aa"]


def test_messages_in_disk_are_capped_at_8(open_store: OpenStore) -> None:
    # With no memory allowance every message counts as "in disk" (reference §10.3):
    # at most 8 messages (maxTransferCountOnMessageInDisk) per pull.
    store = open_store(replace(TINY_CONFIG, access_message_in_memory_max_ratio=0))
    put_n(store, 10)
    result = get(store, 0, max_messages=32)
    assert summary(result) == (S.FOUND, 8, 0, 10)
    assert len(result.messages) == 8


def test_messages_in_disk_are_capped_at_64_kib(open_store: OpenStore) -> None:
    # maxTransferBytesOnMessageInDisk: 3 records of ~30 KiB fit in 64 KiB only twice.
    config = replace(
        TINY_CONFIG, commit_log_file_size=256 * 1024, access_message_in_memory_max_ratio=0
    )
    store = open_store(config)
    put_n(store, 3, size=30_000)
    result = get(store, 0)
    assert summary(result) == (S.FOUND, 2, 0, 3)


def test_messages_in_memory_are_capped_at_32(open_store: OpenStore) -> None:
    # maxTransferCountOnMessageInMemory applies like the in-disk count does (reference
    # §10.3); whatever the caller asks for, one pull returns at most 32 hot messages.
    config = replace(TINY_CONFIG, commit_log_file_size=64 * 1024, consume_queue_units_per_file=100)
    store = open_store(config)
    put_n(store, 40, size=10)
    result = get(store, 0, max_messages=100)
    assert summary(result) == (S.FOUND, 32, 0, 40)
    assert [m.queue_offset for m in result.messages] == list(range(32))
    rest = get(store, 32, max_messages=100)
    assert [m.queue_offset for m in rest.messages] == list(range(32, 40))


def test_the_in_memory_count_cap_is_configurable(open_store: OpenStore) -> None:
    store = open_store(replace(TINY_CONFIG, max_transfer_count_in_memory=3))
    put_n(store, 5)
    result = get(store, 0, max_messages=32)
    assert summary(result) == (S.FOUND, 3, 0, 5)
    assert len(result.messages) == 3


def test_read_stops_at_the_end_of_a_consume_queue_file(store: MessageStore) -> None:
    put_n(store, 25)
    result = get(store, 7)
    assert summary(result) == (S.FOUND, 10, 0, 25)
    assert [m.queue_offset for m in result.messages] == [7, 8, 9]


def test_max_messages_cap(store: MessageStore) -> None:
    put_n(store, 8)
    assert len(get(store, 0, max_messages=3).messages) == 3
    assert len(get(store, 0, max_messages=8).messages) == 8
    assert len(get(store, 0, max_messages=100).messages) == 8
    assert len(get(store, 0, max_messages=0).messages) == 1  # at least one per pull


def test_first_message_is_returned_even_when_bigger_than_max_bytes(store: MessageStore) -> None:
    results = put_n(store, 5, size=500)
    size = results[0].size
    one = get(store, 0, max_bytes=10)
    assert summary(one) == (S.FOUND, 1, 0, 5)
    assert len(one.messages) == 1
    two = get(store, 0, max_bytes=size * 2 + size // 2)
    assert [m.queue_offset for m in two.messages] == [0, 1]
    assert two.next_begin_offset == 2
    assert sum(m.size for m in two.messages) == 2 * size
    exact = get(store, 0, max_bytes=size * 3)
    assert len(exact.messages) == 3


def _two_files_then_drop_the_first(store: MessageStore) -> tuple[list[PutResult], PutResult]:
    """File 0: one message of queue 1 and queue-0 messages 0..3; file 1: queue-0 4..7.

    Then retention removes CommitLog file 0 (what the cleaner does to an expired file)
    while the ConsumeQueues still point into it.
    """
    body = b"x" * 700  # 797-byte records: five per 4 KiB file
    lonely = store.put([message(body=body, queue_id=1)])[0]
    queue0 = [store.put([message(body=body + b"%d" % i)])[0] for i in range(8)]
    assert [r.physical_offset // COMMIT_LOG_FILE_SIZE for r in queue0] == [0] * 4 + [1] * 4
    assert store.commit_log.queue.delete_expired_by_time(0, clean_immediately=True) == 1
    assert store.commit_log.min_offset == COMMIT_LOG_FILE_SIZE
    return queue0, lonely


def test_message_was_removing(store: MessageStore) -> None:
    _two_files_then_drop_the_first(store)
    assert summary(get(store, 0, queue_id=1)) == (S.MESSAGE_WAS_REMOVING, 1, 0, 1)
    # Removed units are skipped; the first message still there is found.
    result = get(store, 0)
    assert summary(result) == (S.FOUND, 8, 0, 8)
    assert [m.queue_offset for m in result.messages] == [4, 5, 6, 7]


def test_after_reopen_min_offset_moves_past_removed_messages(
    open_store: OpenStore, store: MessageStore
) -> None:
    _two_files_then_drop_the_first(store)
    store.close()
    store = open_store()
    assert store.check() == []
    assert (store.min_offset_in_queue("TopicA", 0), store.max_offset_in_queue("TopicA", 0)) == (
        4,
        8,
    )
    assert summary(get(store, 2)) == (S.OFFSET_TOO_SMALL, 4, 4, 8)
    assert summary(get(store, 4, max_messages=1)) == (S.FOUND, 5, 4, 8)
    assert summary(get(store, 8)) == (S.OFFSET_OVERFLOW_ONE, 8, 4, 8)
    # min > 0: an offset far beyond the end is moved to the max, not the min.
    assert summary(get(store, 9)) == (S.OFFSET_OVERFLOW_BADLY, 8, 4, 8)
    # Queue 1 lost its only message: min == max == 1.
    assert summary(get(store, 0, queue_id=1)) == (S.OFFSET_TOO_SMALL, 1, 1, 1)
    assert summary(get(store, 1, queue_id=1)) == (S.OFFSET_OVERFLOW_ONE, 1, 1, 1)
    assert store.put([message(body=b"next")])[0].queue_offset == 8


def test_rebuilt_consume_queue_is_pre_blank_filled(
    open_store: OpenStore, store: MessageStore, store_dir: Path
) -> None:
    """Queues rebuilt from a CommitLog whose first file expired start at a non-zero offset."""
    _two_files_then_drop_the_first(store)
    store.close()
    shutil.rmtree(store_dir / "consumequeue")
    store = open_store()
    queue = store.find_consume_queue("TopicA", 0)
    assert queue is not None
    assert [f.path.name for f in queue.queue.files] == [offset_to_file_name(0)]
    pre_blank = CQ_UNIT_STRUCT.pack(0, 0x7FFFFFFF, 0)
    assert queue.queue.files[0].buffer[: 4 * 20] == pre_blank * 4
    assert queue.get_unit(4) is not None
    assert (queue.min_offset, queue.max_offset) == (4, 8)
    assert summary(get(store, 0)) == (S.OFFSET_TOO_SMALL, 4, 4, 8)
    assert [m.queue_offset for m in get(store, 4).messages] == [4, 5, 6, 7]
    assert summary(get(store, 30)) == (S.OFFSET_OVERFLOW_BADLY, 8, 4, 8)
    assert store.find_consume_queue("TopicA", 1) is None  # its only message is gone
    assert store.check() == []


def test_flush_reaches_the_end_after_retention_deleted_files(store: MessageStore) -> None:
    put_n(store, 6, size=1500)  # three 4 KiB files, two records each
    store.flush_commit_log(0)  # one step: the first file only
    assert store.commit_log.flushed_where == COMMIT_LOG_FILE_SIZE
    put_n(store, 2, size=1500)
    assert store.commit_log.queue.delete_expired_by_time(0, clean_immediately=True) == 3
    store.flush_all()
    assert store.commit_log.flushed_where == store.commit_log.max_offset


def test_offset_found_null_when_the_consume_queue_file_is_gone(store: MessageStore) -> None:
    """A ConsumeQueue file deleted under a reader whose min offset was not moved yet."""
    put_n(store, 25)
    queue = store.find_consume_queue("TopicA", 0)
    assert queue is not None
    queue.queue.delete_first_files(1)
    assert summary(get(store, 3)) == (S.OFFSET_FOUND_NULL, 10, 0, 25)
    assert summary(get(store, 12, max_messages=1)) == (S.FOUND, 13, 0, 25)


# ---------------------------------------------------------------- lookups


def test_look_message_by_offset_and_by_id(store: MessageStore) -> None:
    results = put_n(store, 12, size=700)
    for result in results:
        by_offset = store.look_message_by_offset(result.physical_offset)
        assert by_offset is not None
        assert by_offset.queue_offset == result.queue_offset
        by_id = store.look_message_by_id(result.msg_id)
        assert by_id is not None
        assert by_id.body == by_offset.body
        assert by_id.msg_id == result.msg_id


def test_ipv6_store_host_gives_56_char_ids_that_resolve(open_store: OpenStore) -> None:
    store = open_store(replace(TINY_CONFIG, store_host=("fe80::1", 10911)))
    results = [
        store.put(
            [Message("TopicA", b"v6-%d" % i, 0, {"TAGS": "TagA"}, born_host=("::1", 4000 + i))]
        )[0]
        for i in range(30)
    ]
    for result in results:
        assert len(result.msg_id) == 56
        assert result.msg_id == encode_msg_id("fe80::1", 10911, result.physical_offset)
        found = store.look_message_by_id(result.msg_id)
        assert found is not None
        assert found.store_host == ("fe80::1", 10911)
        assert found.born_host == ("::1", 4000 + result.queue_offset)
        assert found.sys_flag & 0x30 == 0x30
    pulled = get(store, 0, tags="TagA").messages
    assert [m.body for m in pulled] == [b"v6-%d" % i for i in range(10)]
    assert store.check() == []


@pytest.mark.parametrize(
    "bad_id",
    [
        pytest.param("7F000001 00002A9F 000000000000  ", id="hex-with-spaces"),
        pytest.param("", id="empty"),
        pytest.param("hello", id="short"),
        pytest.param("G" * 32, id="not-hex"),
        pytest.param(encode_msg_id("127.0.0.1", 10911, 10**9), id="beyond-the-log"),
        pytest.param(encode_msg_id("127.0.0.1", 10911, 5), id="inside-a-record"),
        pytest.param(encode_msg_id("127.0.0.1", 10911, -8), id="negative-offset"),
        pytest.param(encode_msg_id("::1", 10911, 10**9), id="ipv6-beyond"),
    ],
)
def test_look_message_by_garbage_id_is_none(store: MessageStore, bad_id: str) -> None:
    put_n(store, 3)
    assert store.look_message_by_id(bad_id) is None


def test_look_message_by_offset_at_the_end_or_on_a_blank_is_none(store: MessageStore) -> None:
    results = put_n(store, 6, size=1500)
    assert store.look_message_by_offset(store.commit_log.max_offset) is None
    blank_at = results[1].end_offset  # two 1.5 KiB records per file, then a BLANK
    assert blank_at % COMMIT_LOG_FILE_SIZE != 0
    assert results[2].physical_offset == COMMIT_LOG_FILE_SIZE
    assert store.look_message_by_offset(blank_at) is None


def test_offset_by_time(store: MessageStore) -> None:
    results = []
    for i in range(3):
        results.append(store.put([message(body=b"%d" % i)])[0])
        time.sleep(0.003)
    assert len({r.store_timestamp for r in results}) == 3
    for result in results:
        assert store.offset_by_time("TopicA", 0, result.store_timestamp) == result.queue_offset
        assert store.store_timestamp_at("TopicA", 0, result.queue_offset) == result.store_timestamp
    assert store.offset_by_time("TopicA", 0, 0) == 0
    assert store.offset_by_time("Unknown", 0, 0) == 0
    assert store.store_timestamp_at("TopicA", 0, -1) == -1
    assert store.store_timestamp_at("Unknown", 0, 0) == -1


# ---------------------------------------------------------------- arrival listener


def test_arrival_listener_gets_topic_queue_new_max_and_tags_code(store: MessageStore) -> None:
    calls: list[tuple[str, int, int, int]] = []

    def listener(topic: str, queue_id: int, max_offset: int, code: int) -> None:
        assert store.max_offset_in_queue(topic, queue_id) == max_offset  # after dispatch
        calls.append((topic, queue_id, max_offset, code))

    store.arrival_listeners.append(listener)
    store.put([message("TopicA", queue_id=1, tags="TagA")])
    store.put([message("TopicA", queue_id=1)])
    store.put([message("TopicB", queue_id=0, tags="Hello World")])
    store.put([message("TopicA", queue_id=3, tags="TAG1") for _ in range(2)])
    # A batch is dispatched whole: one notice per distinct tags code, with its end.
    store.put([message("TopicA", queue_id=4, tags=t) for t in ("TagA", None, "TagA")])
    assert calls == [
        ("TopicA", 1, 1, 2598919),
        ("TopicA", 1, 2, 0),
        ("TopicB", 0, 1, -862545276),
        ("TopicA", 3, 2, 2567159),
        ("TopicA", 4, 3, 2598919),
        ("TopicA", 4, 3, 0),
    ]


# ---------------------------------------------------------------- reopen


def test_reopen_keeps_everything(open_store: OpenStore, store: MessageStore) -> None:
    expected: dict[tuple[str, int], list[PutResult]] = {}
    for i in range(60):
        key = (["TopicA", "TopicB", "%RETRY%g"][i % 3], i % 4)
        tags = ["TagA", "TagB", None][i % 3]
        body = bytes([i]) * (i * 37 % 900)
        result = store.put([message(key[0], body, key[1], tags=tags)])[0]
        expected.setdefault(key, []).append(result)
    end = store.commit_log.max_offset
    store.close()
    assert not (store.root / "abort").exists()
    store = open_store()
    assert store.check() == []
    assert store.commit_log.max_offset == end
    for (topic, queue_id), results in expected.items():
        got = get(store, 0, topic, queue_id)
        assert summary(got) == (S.FOUND, len(results), 0, len(results))
        assert [m.physical_offset for m in got.messages] == [r.physical_offset for r in results]
        assert [m.msg_id for m in got.messages] == [r.msg_id for r in results]
    after = store.put([message("TopicA", b"after", 0)])[0]
    assert after.queue_offset == len(expected[("TopicA", 0)])
    assert after.physical_offset >= end


def test_reopen_after_every_put(open_store: OpenStore) -> None:
    offsets = []
    for i in range(12):
        store = open_store()
        offsets.append(store.put([message(body=b"y" * 600, tags=f"T{i}")])[0].queue_offset)
        store.close()
    store = open_store()
    assert offsets == list(range(12))
    assert store.check() == []
    bodies = [m.tags for m in get(store, 0).messages]
    assert bodies == [f"T{i}" for i in range(10)]  # up to the end of the first CQ file


def test_reopening_with_another_file_size_names_the_file(
    open_store: OpenStore, store: MessageStore, store_dir: Path
) -> None:
    put_n(store, 3)
    store.close()
    with pytest.raises(StoreLoadError, match=offset_to_file_name(0)):
        open_store(replace(TINY_CONFIG, commit_log_file_size=2 * COMMIT_LOG_FILE_SIZE))
    assert (store_dir / "commitlog" / offset_to_file_name(0)).stat().st_size == 4096
    assert get(open_store(), 0).messages[2].queue_offset == 2  # the lock was let go


def test_a_second_open_of_the_same_directory_fails(open_store: OpenStore) -> None:
    open_store()
    with pytest.raises(StoreLockedError):
        open_store()


def test_closed_store_refuses_puts_and_gets(store: MessageStore) -> None:
    store.close()
    with pytest.raises(StoreClosedError):
        store.put([message()])
    with pytest.raises(StoreClosedError):
        get(store, 0)
    store.close()  # a second close is harmless


# ---------------------------------------------------------------- bad input


def _assert_nothing_written(store: MessageStore, max_offset: int) -> None:
    assert store.commit_log.max_offset == max_offset
    assert store.topics() == []
    cq_root = store.root / "consumequeue"
    assert not cq_root.exists() or list(cq_root.iterdir()) == []


BAD_TOPICS = [
    pytest.param("", id="empty"),
    pytest.param("t" * 128, id="128-chars"),
    pytest.param("a/b", id="slash"),
    pytest.param("../x", id="dot-dot"),
    pytest.param("a b", id="space"),
    pytest.param("tøpic", id="unicode"),
    pytest.param("topic\n", id="trailing-newline"),
]


@pytest.mark.parametrize("topic", BAD_TOPICS)
def test_invalid_topic_is_refused_and_nothing_is_written(store: MessageStore, topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        store.put([message(topic)])
    with pytest.raises(InvalidTopicError):
        store.put([message(topic), message(topic)])
    _assert_nothing_written(store, 0)
    assert store.commit_log.queue.files == []


@pytest.mark.parametrize(
    "queue_id", [pytest.param(-1, id="negative"), pytest.param(MAX_QUEUES, id="max-queues")]
)
def test_queue_id_out_of_range_is_refused(store: MessageStore, queue_id: int) -> None:
    with pytest.raises(QueueIdOutOfRangeError):
        store.put([message(queue_id=queue_id)])
    with pytest.raises(QueueIdOutOfRangeError):
        store.put([message(queue_id=queue_id)])
    _assert_nothing_written(store, 0)


def test_highest_queue_id_is_accepted(store: MessageStore) -> None:
    assert store.put([message(queue_id=MAX_QUEUES - 1)])[0].queue_id == MAX_QUEUES - 1


def test_properties_of_32768_bytes_are_refused(open_store: OpenStore) -> None:
    # A CommitLog file big enough for 32 KiB of properties, to show the limit is theirs.
    store = open_store(replace(TINY_CONFIG, commit_log_file_size=128 * 1024))
    value_32767 = "v" * (32767 - len("KEYS\x01\x02"))
    with pytest.raises(PropertiesTooLargeError):
        store.put([message(keys=value_32767 + "v")])
    _assert_nothing_written(store, 0)
    assert store.put([message(keys=value_32767)])[0].queue_offset == 0


def test_body_over_max_message_size_is_refused(open_store: OpenStore) -> None:
    store = open_store(replace(TINY_CONFIG, max_message_size=1000))
    with pytest.raises(MessageTooLargeError):
        store.put([message(body=b"x" * 1001)])
    with pytest.raises(MessageTooLargeError):
        store.put([message(body=b"x"), message(body=b"x" * 1001)])
    _assert_nothing_written(store, 0)
    assert store.put([message(body=b"x" * 1000)])[0].queue_offset == 0


def test_record_bigger_than_a_commit_log_file_is_refused(store: MessageStore) -> None:
    store.put([message("Other", b"first")])
    before = store.commit_log.max_offset
    with pytest.raises(MessageTooLargeError):
        store.put([message(body=b"x" * COMMIT_LOG_FILE_SIZE)])
    with pytest.raises(MessageTooLargeError):
        store.put([message(body=b"x" * 1500) for _ in range(3)])
    assert store.commit_log.max_offset == before
    assert store.find_consume_queue("TopicA", 0) is None
    assert store.put([message(body=b"ok")])[0].queue_offset == 0


def test_bad_input_after_good_input_leaves_offsets_alone(store: MessageStore) -> None:
    put_n(store, 3)
    before = store.commit_log.max_offset
    for bad in (message("a/b"), message(queue_id=-1), message(tags="t" * 33_000)):
        with pytest.raises(MessageRejectedError):
            store.put([bad])
    assert store.commit_log.max_offset == before
    assert store.put([message()])[0].queue_offset == 3
    assert store.check() == []


def test_a_message_may_keep_an_earlier_store_time(store: MessageStore) -> None:
    """A committed transactional message keeps its half message's store time."""
    store.put([message(body=b"first")])
    earlier = int(time.time() * 1000) - 60_000
    result = store.put([Message("TopicA", b"committed", store_timestamp=earlier)])[0]
    assert result.store_timestamp == earlier
    found = store.look_message_by_offset(result.physical_offset)
    assert found is not None and found.store_timestamp == earlier
    later = store.put([message(body=b"after")])[0]
    assert later.store_timestamp >= earlier + 60_000
