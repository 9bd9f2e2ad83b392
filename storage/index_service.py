"""IndexService: the index files of a store, built at dispatch, queried by key and time.

Every dispatched message is indexed under ``topic#UNIQ_KEY`` and ``topic#k`` for each key
``k`` of its KEYS property; a message sent with an idempotency key also under
``topic#\x01key`` (:func:`idempotency_index_key`), which no KEYS or UNIQ_KEY entry can be: a
property value never holds ``\x01``. A full file is flushed and a new one started; the checkpoint's
``indexMsgTimestamp`` records the end time of the last full, flushed file. After an
unclean exit, files newer than that are dropped and rebuilt by recovery. Existing files
keep their own geometry (the configured one or RocketMQ's default, read from the file size);
new files get the configured one.
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Final, cast

from storage.checkpoint import StoreCheckpoint
from storage.delay_levels import SCHEDULE_TOPIC
from storage.index_file import (
    IndexFile,
    IndexFileSizeError,
    KeyHasher,
    UniqKeyHasher,
    index_geometry,
)
from storage.record.java_hash import java_string_hash, java_string_hash_after
from storage.record.message import StoredMessage
from storage.record.properties import KEY_SEPARATOR, PROPERTY_REAL_TOPIC
from storage.timer.transform import TIMER_TOPIC

if TYPE_CHECKING:
    from storage.commit_log import CommitLog
    from storage.store_types import StoreConfig

MAX_MSGS_NUM_BATCH: Final = 64
IDEMPOTENCY_MARK: Final = "\x01"
"""Starts the key part of an idempotency index key: property values (KEYS, UNIQ_KEY) never
hold it, so an idempotency key and a business key never share an index key."""


def idempotency_scope(topic: str, properties: dict[str, str]) -> str:
    """The topic an idempotency key belongs to: a delayed or timer message waits in the
    schedule or timer topic, but was sent to (and is looked up in) its ``REAL_TOPIC``."""
    if topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        return properties.get(PROPERTY_REAL_TOPIC) or topic
    return topic


def _offset_of(entry: tuple[int, int]) -> int:
    return entry[1]


def idempotency_index_key(scope: str, key: str) -> str:
    """The index key of idempotency key ``key`` in topic ``scope``."""
    return f"{scope}#{IDEMPOTENCY_MARK}{key}"


@lru_cache(maxsize=256)
def _idempotency_head_hash(scope: str) -> int:
    """The Java hash of ``scope#\x01``, the head of every idempotency index key of a topic."""
    return java_string_hash(f"{scope}#{IDEMPOTENCY_MARK}") & 0xFFFFFFFF


@lru_cache(maxsize=1024)
def idempotency_key_hash(scope: str, key: str) -> int:
    """``index_key_hash(idempotency_index_key(scope, key))``: the remembered hash of its head
    (one per topic), then the key's characters, without joining the two (Java's hash is
    linear) or keeping the key in a cache of strings. Remembered for the last keys: a keyed
    put's look-up and its dispatch right after hash the same key, and the dispatch finds it
    here."""
    value = java_string_hash_after(_idempotency_head_hash(scope), key)
    return 0 if value == -0x80000000 else abs(value)  # = index_key_hash's rule


def index_file_name(timestamp_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as RocketMQ names index files."""
    seconds, millis = divmod(timestamp_ms, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(seconds)) + f"{millis:03d}"


class IndexService:
    """Creates, fills, queries and expires index files."""

    def __init__(
        self,
        directory: Path,
        hash_slot_num: int,
        max_index_num: int,
        checkpoint: StoreCheckpoint,
    ) -> None:
        self.directory = directory
        self.hash_slot_num = hash_slot_num
        self.max_index_num = max_index_num
        self.checkpoint = checkpoint
        self.files: list[IndexFile] = []
        self._uniq_key_hash = UniqKeyHasher()
        self._key_hash = KeyHasher()

    def load(self, last_exit_ok: bool) -> None:
        """Open every index file; after an unclean exit drop those newer than the checkpoint."""
        self.directory.mkdir(parents=True, exist_ok=True)
        files = []
        for path in sorted(p for p in self.directory.iterdir() if p.name.isdigit()):
            if not last_exit_ok and self._torn_creation(path):
                # Created just before a power cut: its name survived, not its size or data.
                path.unlink()
                continue
            index = IndexFile(path, self.hash_slot_num, self.max_index_num)
            # Headers reach the file on flush and seal: a never-flushed one reads as zero.
            stale = index.end_timestamp > self.checkpoint.index_msg_timestamp
            if not last_exit_ok and (stale or index.end_timestamp == 0):
                index.destroy()
                continue
            files.append(index)
        self.files = files

    def _torn_creation(self, path: Path) -> bool:
        """A file of no index size that holds nothing: made just before a crash."""
        try:
            index_geometry(path, path.stat().st_size, self.hash_slot_num, self.max_index_num)
        except IndexFileSizeError:
            return _never_written(path)
        return False

    @property
    def end_phy_offset(self) -> int:
        """Physical offset of the last indexed message; -1 when nothing is indexed."""
        for index in reversed(self.files):
            if index.index_count > 1:
                return index.end_phy_offset
        return -1

    def build_index(
        self,
        topic: str,
        physical_offset: int,
        store_timestamp: int,
        keys: str | None,
        uniq_key: str | None,
        idempotency_hash: int | None = None,
    ) -> None:
        """Index one message unless an earlier dispatch already did; ``idempotency_hash`` is
        the :func:`idempotency_key_hash` of its idempotency key, if it was sent with one."""
        files = self.files
        last = files[-1] if files else None
        # A file started after a full one inherits its end, so that check holds there too.
        if (
            last is not None
            and (last.index_count > 1 or last.end_phy_offset > 0)
            and physical_offset <= last.end_phy_offset
        ):
            return
        put = self._put if last is None or last.is_full else last.put_hash
        if uniq_key:
            hashed = self._uniq_key_hash(topic, uniq_key)
            if not put(hashed, physical_offset, store_timestamp):
                put = self._put  # the file filled up: roll
                put(hashed, physical_offset, store_timestamp)
        if keys:
            for key in keys.split(KEY_SEPARATOR):
                if not key:
                    continue
                hashed = self._key_hash(topic, key)
                if not put(hashed, physical_offset, store_timestamp):
                    put = self._put
                    put(hashed, physical_offset, store_timestamp)
        if idempotency_hash is not None and not put(
            idempotency_hash, physical_offset, store_timestamp
        ):
            self._put(idempotency_hash, physical_offset, store_timestamp)

    def build_index_batch(
        self,
        topic: str,
        offsets: list[int],
        store_timestamp: int,
        keys: list[str | None],
        uniq_keys: list[str | None],
        idempotency_keys: list[tuple[int, str]] = [],  # noqa: B006 - read only
    ) -> None:
        """Index the records of one batch (rising offsets) in one loop; as
        :meth:`build_index` for each, records an earlier dispatch indexed are skipped.
        ``idempotency_keys``: (record number, key) of its keyed records (a batch's key is
        on its first record)."""
        files = self.files
        last = files[-1] if files else None
        done_to = -1
        if last is not None and (last.index_count > 1 or last.end_phy_offset > 0):
            done_to = last.end_phy_offset
        uniq_key_hash, key_hash = self._uniq_key_hash, self._key_hash
        entries: list[tuple[int, int]] = []
        add = entries.append
        if idempotency_keys and idempotency_keys[0][0] == 0:  # a keyed batch: on its first
            if offsets[0] > done_to:
                add((idempotency_key_hash(topic, idempotency_keys[0][1]), offsets[0]))
            idempotency_keys = idempotency_keys[1:]
        if offsets[0] > done_to and not any(keys) and all(uniq_keys):
            # Bodies alone (the common batch): a UNIQ_KEY each, hashed in one go.
            hashes = uniq_key_hash.many(topic, cast("list[str]", uniq_keys))
            entries += zip(hashes, offsets, strict=True)
        else:
            for physical_offset, key_text, uniq_key in zip(offsets, keys, uniq_keys, strict=True):
                if physical_offset <= done_to:
                    continue
                if uniq_key:
                    add((uniq_key_hash(topic, uniq_key), physical_offset))
                if key_text:
                    for key in key_text.split(KEY_SEPARATOR):
                        if key:
                            add((key_hash(topic, key), physical_offset))
        if idempotency_keys:  # keys on later records (not made by sends): rare
            for number, idempotency_key in idempotency_keys:
                if offsets[number] > done_to:
                    hashed = idempotency_key_hash(topic, idempotency_key)
                    add((hashed, offsets[number]))
            entries.sort(key=_offset_of)  # stable: offsets rise, as the files need
        done = last.put_hashes(entries, store_timestamp) if last is not None else 0
        for hashed, physical_offset in entries[done:]:  # a full (or no) file: roll
            self._put(hashed, physical_offset, store_timestamp)

    def _put(self, key_hash: int, physical_offset: int, store_timestamp: int) -> bool:
        """Add one entry to the last file, rolling to a new one when it is full; True."""
        files = self.files
        if files and files[-1].put_hash(key_hash, physical_offset, store_timestamp):
            return True
        index = self._writable_file(store_timestamp)
        if not index.put_hash(key_hash, physical_offset, store_timestamp):
            self._seal(index)
            self._new_file(store_timestamp, index).put_hash(
                key_hash, physical_offset, store_timestamp
            )
        return True

    def _writable_file(self, now_ms: int) -> IndexFile:
        if self.files and not self.files[-1].is_full:
            return self.files[-1]
        previous = self.files[-1] if self.files else None
        if previous is not None:
            self._seal(previous)
        return self._new_file(now_ms, previous)

    def _new_file(self, now_ms: int, previous: IndexFile | None) -> IndexFile:
        stamp = max(now_ms, int(time.time() * 1000))
        path = self.directory / index_file_name(stamp)
        while path.exists():
            stamp += 1
            path = self.directory / index_file_name(stamp)
        index = IndexFile(path, self.hash_slot_num, self.max_index_num, create=True)
        if previous is not None:
            # A new file starts where the previous one ended (RocketMQ).
            index.begin_phy_offset = index.end_phy_offset = previous.end_phy_offset
            index.begin_timestamp = index.end_timestamp = previous.end_timestamp
        self.files.append(index)
        return index

    def _seal(self, index: IndexFile) -> None:
        """A full file: flush it and record its end time in the checkpoint."""
        index.flush()
        self.checkpoint.index_msg_timestamp = index.end_timestamp
        self.checkpoint.flush()

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Physical offsets of messages indexed under ``topic#key`` in [begin, end], newest
        files first, at most ``max_num`` (capped at 64)."""
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        full_key = f"{topic}#{key}"
        found: list[int] = []
        for index in reversed(self.files):
            if len(found) >= max_num:
                break
            if index.overlaps(begin, end):
                found.extend(index.select_phy_offsets(full_key, max_num - len(found), begin, end))
            if index.begin_timestamp < begin:
                break
        return found

    def query_messages(
        self, commit_log: CommitLog, topic: str, key: str, max_num: int, begin: int, end: int
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY is ``key``, stored in [begin, end].

        The index compares hashes only; the real key is re-checked on every record read
        from ``commit_log``. At most 64, oldest first.
        """
        found = []
        max_offset = commit_log.max_offset  # entries past it were truncated away
        offsets = self.query(topic, key, max_num, begin, end)
        for offset in sorted(o for o in set(offsets) if o < max_offset):
            message = commit_log.look_message(offset)
            if message is None or message.topic != topic:
                continue
            if key in message.keys or message.uniq_key == key:
                found.append(message)
        return found

    def lookup(self, key_hash: int, since: int) -> list[int]:
        """Physical offsets of entries with hash ``key_hash`` (an index key's
        :func:`~storage.index_file.index_key_hash`) stored at ``since`` or later (to the
        second: the caller re-checks the records), newest first, at most
        :data:`MAX_MSGS_NUM_BATCH`. Walks only the files that reach back to ``since``."""
        found: list[int] = []
        # An entry keeps its time in whole seconds after its file's begin: one second earlier.
        begin = since - 1000
        for index in reversed(self.files):
            if index.end_timestamp >= begin:
                found.extend(index.select_hash(key_hash, MAX_MSGS_NUM_BATCH - len(found), begin))
            if index.begin_timestamp < begin or len(found) >= MAX_MSGS_NUM_BATCH:
                break
        return found

    def delete_expired(self, min_physical_offset: int) -> int:
        """Drop files (never the last) whose entries all point below the CommitLog min."""
        doomed = [i for i in self.files[:-1] if i.end_phy_offset < min_physical_offset]
        for index in doomed:
            index.destroy()
        self.files = [i for i in self.files if i not in doomed]
        return len(doomed)

    def flush(self) -> None:
        if self.files:
            self.files[-1].flush()

    def close(self) -> None:
        for index in self.files:
            index.close()


def _never_written(path: Path) -> bool:
    """Whether an index file holds no byte but zeros (or none at all): a file whose
    creation a crash cut short. Its entries, if any were made, come back from the
    CommitLog (the index is rebuilt after an unclean exit)."""
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            if chunk.count(0) != len(chunk):
                return False
    return True


def load_index(
    directory: Path, config: StoreConfig, checkpoint: StoreCheckpoint, last_exit_ok: bool
) -> IndexService | None:
    """The store's index, loaded (rebuilt later after an unclean exit); None when
    ``config`` turns the index off."""
    if not config.message_index_enable:
        return None
    index = IndexService(directory, config.max_hash_slot_num, config.max_index_num, checkpoint)
    index.load(last_exit_ok)
    return index
