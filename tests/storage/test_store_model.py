"""The store against a plain Python model, driven by a Hypothesis state machine.

Appends (single and batch) of random sizes go to random topics and queues of a store with
4 KiB CommitLog files and 10-unit ConsumeQueue files, so nearly every step crosses a file
boundary of one kind or the other. Reads by queue offset (with and without tag filters,
count and byte caps, including every offset status and ``next_begin_offset``), by physical
offset, by msgId and by store time, across flushes, clean close/reopen (normal recovery) and
in-process kills (abnormal recovery), must all agree with a dict of (topic, queue) -> list
of messages.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from storage import GetMessageStatus, MessageStore, PutResult, TagFilter
from storage.errors import MessageTooLargeError
from storage.record.message import Message
from tests.storage.conftest import COMMIT_LOG_FILE_SIZE, CQ_UNITS_PER_FILE, TINY_CONFIG

TOPIC_NAMES = ["TopicA", "%RETRY%grp", "a|b", "x-1_Y"]
# Half of the draws go to one queue so that it crosses ConsumeQueue files (10 units) often.
TOPICS = st.just(TOPIC_NAMES[0]) | st.sampled_from(TOPIC_NAMES)
QUEUES = st.just(0) | st.integers(min_value=0, max_value=3)
TAGS = st.sampled_from([None, "TagA", "TagB", "TagC"])
BODY_SIZES = st.integers(min_value=0, max_value=1500)
# None, "" and "*" match everything; an expression with no tag left ("||", " ") nothing.
FILTERS = st.sampled_from(
    [None, "", "*", "TagA", "TagB||TagC", "TagA || TagB", "TagZ", "||", " ", " || "]
)
MAX_RECORD = COMMIT_LOG_FILE_SIZE - 8  # a record (or batch) plus the end-of-file BLANK


@dataclass(frozen=True)
class Stored:
    """What the model knows of one stored message."""

    topic: str
    queue_id: int
    queue_offset: int
    body: bytes
    tags: str | None
    msg_id: str
    physical_offset: int
    size: int
    store_timestamp: int


def record_size(topic: str, body: bytes, tags: str | None) -> int:
    """Reference §2.2: 91 fixed bytes + body + topic + properties."""
    properties = f"TAGS\x01{tags}\x02".encode() if tags else b""
    return 91 + len(body) + len(topic.encode()) + len(properties)


def filter_matches(expression: str | None, tags: str | None) -> bool:
    if expression is None or expression in ("", "*"):
        return True
    wanted = {t.strip() for t in expression.split("||") if t.strip()}
    return tags is not None and tags in wanted


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="spoolmq-model-"))
        self.store = MessageStore.open(self.root, TINY_CONFIG)
        self.queues: dict[tuple[str, int], list[Stored]] = {}
        self.log_end = 0
        self.counter = 0

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    # ------------------------------------------------------------ helpers

    def _body(self, size: int) -> bytes:
        """``size`` bytes, distinct from every other body (but empty when ``size`` is 0)."""
        self.counter += 1
        head = b"%d|" % self.counter
        return (head + bytes([self.counter % 251]) * size)[:size]

    def _message(self, topic: str, queue_id: int, body: bytes, tags: str | None) -> Message:
        properties = {"TAGS": tags} if tags else {}
        return Message(topic=topic, body=body, queue_id=queue_id, properties=properties)

    def _remember(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        tags: str | None,
        put: PutResult,
        append_size: int,
    ) -> None:
        """Record ``put``; ``append_size`` is the size of the whole append (record or batch)."""
        queue = self.queues.setdefault((topic, queue_id), [])
        assert (put.topic, put.queue_id, put.queue_offset) == (topic, queue_id, len(queue))
        assert put.size == record_size(topic, body, tags)
        # Appends are contiguous except for a jump to the next file after a BLANK; a
        # record never straddles two files.
        if put.physical_offset != self.log_end:
            assert put.physical_offset > self.log_end
            assert put.physical_offset % COMMIT_LOG_FILE_SIZE == 0
            assert put.physical_offset - self.log_end < append_size + 8
        assert put.physical_offset // COMMIT_LOG_FILE_SIZE == (
            (put.end_offset - 1) // COMMIT_LOG_FILE_SIZE
        )
        self.log_end = put.end_offset
        queue.append(
            Stored(
                topic,
                queue_id,
                put.queue_offset,
                body,
                tags,
                put.msg_id,
                put.physical_offset,
                put.size,
                put.store_timestamp,
            )
        )

    def _all(self) -> list[Stored]:
        return [m for queue in self.queues.values() for m in queue]

    # ------------------------------------------------------------ appends

    @rule(
        topic=TOPICS,
        queue_id=QUEUES,
        size=BODY_SIZES,
        tags=TAGS,
    )
    def append_single(self, topic: str, queue_id: int, size: int, tags: str | None) -> None:
        body = self._body(size)
        put = self.store.put([self._message(topic, queue_id, body, tags)])[0]
        self._remember(topic, queue_id, body, tags, put, put.size)

    @rule(
        topic=TOPICS,
        queue_id=QUEUES,
        items=st.lists(st.tuples(BODY_SIZES, TAGS), min_size=1, max_size=6),
    )
    def append_batch(self, topic: str, queue_id: int, items: list[tuple[int, str | None]]) -> None:
        bodies = [(self._body(size), tags) for size, tags in items]
        messages = [self._message(topic, queue_id, body, tags) for body, tags in bodies]
        total = sum(record_size(topic, body, tags) for body, tags in bodies)
        before = self.store.commit_log.max_offset
        if total > MAX_RECORD:
            try:
                self.store.put(messages)
            except MessageTooLargeError:
                assert self.store.commit_log.max_offset == before
                return
            raise AssertionError(f"a {total}-byte batch was accepted")
        puts = self.store.put(messages)
        assert len({p.physical_offset // COMMIT_LOG_FILE_SIZE for p in puts}) == 1
        for (body, tags), put in zip(bodies, puts, strict=True):
            self._remember(topic, queue_id, body, tags, put, total)
            total = 0  # the rest of the batch follows without a gap

    # ------------------------------------------------------------ reads

    @rule(
        data=st.data(),
        topic=TOPICS,
        queue_id=QUEUES,
        max_messages=st.integers(min_value=1, max_value=40),
        max_bytes=st.none() | st.integers(min_value=1, max_value=6000),
        expression=FILTERS,
    )
    def read_by_queue_offset(
        self,
        data: st.DataObject,
        topic: str,
        queue_id: int,
        max_messages: int,
        max_bytes: int | None,
        expression: str | None,
    ) -> None:
        queue = self.queues.get((topic, queue_id))
        length = len(queue) if queue is not None else 0
        offset = data.draw(st.integers(min_value=-2, max_value=length + 3), label="offset")
        tag_filter = TagFilter(expression) if expression is not None else None
        result = self.store.get_message(
            "g", topic, queue_id, offset, max_messages, max_bytes, tag_filter
        )
        status = result.status
        if queue is None:
            assert (status, result.next_begin_offset) == (
                GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
                0,
            )
            return
        assert (result.min_offset, result.max_offset) == (0, length)
        if offset < 0:
            assert (status, result.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, 0)
        elif offset == length:
            assert (status, result.next_begin_offset) == (
                GetMessageStatus.OFFSET_OVERFLOW_ONE,
                offset,
            )
        elif offset > length:
            assert (status, result.next_begin_offset) == (
                GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                0,
            )
        else:
            expected, next_offset = self._expected_read(
                queue, offset, max_messages, max_bytes, expression
            )
            assert [m.queue_offset for m in result.messages] == [m.queue_offset for m in expected]
            assert result.next_begin_offset == next_offset
            assert status is (
                GetMessageStatus.FOUND if expected else GetMessageStatus.NO_MATCHED_MESSAGE
            )
            for got, want in zip(result.messages, expected, strict=True):
                assert (got.topic, got.queue_id, got.body, got.tags) == (
                    want.topic,
                    want.queue_id,
                    want.body,
                    want.tags,
                )
                assert (got.physical_offset, got.size, got.msg_id) == (
                    want.physical_offset,
                    want.size,
                    want.msg_id,
                )
            return
        assert result.messages == []

    @staticmethod
    def _expected_read(
        queue: list[Stored],
        offset: int,
        max_messages: int,
        max_bytes: int | None,
        expression: str | None,
    ) -> tuple[list[Stored], int]:
        """Reference §10.3: one CQ file at most; filtered units count; first always fits."""
        file_end = min(len(queue), (offset // CQ_UNITS_PER_FILE + 1) * CQ_UNITS_PER_FILE)
        cap = 256 * 1024 if max_bytes is None else min(256 * 1024, max_bytes)
        count_cap = min(max_messages, 32)  # maxTransferCountOnMessageInMemory
        found: list[Stored] = []
        total = 0
        scanned = 0
        for stored in queue[offset:file_end]:
            if found and (len(found) >= count_cap or total + stored.size > cap):
                break
            scanned += 1
            if filter_matches(expression, stored.tags):
                found.append(stored)
                total += stored.size
        return found, offset + scanned

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data())
    def read_by_physical_offset_and_msg_id(self, data: st.DataObject) -> None:
        stored = data.draw(st.sampled_from(self._all()), label="message")
        by_offset = self.store.look_message_by_offset(stored.physical_offset)
        by_id = self.store.look_message_by_id(stored.msg_id)
        for got in (by_offset, by_id):
            assert got is not None
            assert (got.topic, got.queue_id, got.queue_offset, got.body, got.tags) == (
                stored.topic,
                stored.queue_id,
                stored.queue_offset,
                stored.body,
                stored.tags,
            )
            assert got.msg_id == stored.msg_id

    @precondition(lambda self: bool(self.queues))
    @rule(data=st.data())
    def offset_by_store_time(self, data: st.DataObject) -> None:
        """The message stored closest to a time, as RocketMQ (store times never go down)."""
        topic, queue_id = data.draw(st.sampled_from(sorted(self.queues)), label="queue")
        queue = self.queues[(topic, queue_id)]
        stored = data.draw(st.sampled_from(queue), label="message")
        timestamp = stored.store_timestamp + data.draw(st.sampled_from([-1, 0, 1]), label="skew")
        later = next((i for i, m in enumerate(queue) if m.store_timestamp >= timestamp), None)
        if later is None:  # every message is earlier: the last one
            expected = queue[-1].queue_offset
        elif later == 0 or queue[later].store_timestamp == timestamp:
            expected = queue[later].queue_offset
        else:  # the closer neighbour; a tie goes to the earlier one
            before, after = queue[later - 1], queue[later]
            closer_after = timestamp - before.store_timestamp > after.store_timestamp - timestamp
            expected = (after if closer_after else before).queue_offset
        assert self.store.offset_by_time(topic, queue_id, timestamp) == expected

    @rule()
    def look_up_past_the_end(self) -> None:
        assert self.store.look_message_by_offset(self.store.commit_log.max_offset) is None

    # ------------------------------------------------------------ lifecycle

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = MessageStore.open(self.root, TINY_CONFIG)
        assert self.store.check() == []
        assert self.store.recovery_findings == []

    @rule()
    def crash_and_reopen(self) -> None:
        """kill -9 in-process: the files are let go without a clean close, so ``abort``
        stays and the next open runs the abnormal recovery. Nothing acknowledged is lost
        (the page cache keeps every write of an ASYNC_FLUSH store)."""
        store = self.store
        store._release_files()  # what a killed process leaves behind
        store._closed = True
        assert (self.root / "abort").exists()
        self.store = MessageStore.open(self.root, TINY_CONFIG)
        assert not self.store.last_exit_ok
        assert self.store.check() == []

    @rule()
    def flush(self) -> None:
        self.store.flush_all()
        assert self.store.commit_log.flushed_where == self.store.commit_log.max_offset
        assert self.store.check() == []

    # ------------------------------------------------------------ invariants

    @invariant()
    def offsets_match_the_model(self) -> None:
        store = self.store
        assert store.commit_log.max_offset == self.log_end
        assert {(t, q) for t in store.topics() for q in store.queue_ids(t)} == set(self.queues)
        for (topic, queue_id), queue in self.queues.items():
            assert store.min_offset_in_queue(topic, queue_id) == 0
            assert store.max_offset_in_queue(topic, queue_id) == len(queue)


StoreModel.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoreModel = StoreModel.TestCase
