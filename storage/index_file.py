"""IndexFile: a hash index from message keys to CommitLog offsets (reference §7).

One file, ``<root>/index/<yyyyMMddHHmmssSSS>``, big-endian::

    header (40 bytes)
         0  8  beginTimestamp     store time of the first entry
         8  8  endTimestamp       store time of the last entry
        16  8  beginPhyOffset
        24  8  endPhyOffset
        32  4  hashSlotCount      slots in use
        36  4  indexCount         next entry number; starts at 1 (entry 0 is never used)
    slots   hashSlotNum x int     number of the newest entry in the slot (0 = empty)
    entries maxIndexNum x 20 bytes
         0  4  keyHash            abs(Java hashCode(key)), MIN_VALUE -> 0
         4  8  phyOffset
        12  4  timeDiff           seconds since beginTimestamp
        16  4  prevIndex          previous entry in the same slot (a linked list)

Lookups compare hashes only; callers re-check the real key.

The geometry (``hashSlotNum``, ``maxIndexNum``) is not in the header; an existing file's is
read from its size (:func:`index_geometry`): the configured one, or RocketMQ's defaults
(5,000,000 slots, 20,000,000 entries: 420,000,040 bytes) so that a store written by
RocketMQ opens. Any other size is an :class:`IndexFileSizeError` at startup.
"""

from __future__ import annotations

import mmap
import operator
import os
import struct
from collections import deque
from itertools import repeat
from pathlib import Path
from typing import Final

from storage.errors import StoreLoadError
from storage.mapped_file import _reserve
from storage.record.java_hash import java_string_hash, java_string_hash_after
from storage.record.layout import pack_rows

INDEX_HEADER: Final = struct.Struct(
    ">q"  # beginTimestamp
    "q"  # endTimestamp
    "q"  # beginPhyOffset
    "q"  # endPhyOffset
    "i"  # hashSlotCount
    "i"  # indexCount
)
INDEX_HEADER_SIZE: Final = INDEX_HEADER.size  # 40
HASH_SLOT_SIZE: Final = 4
INDEX_ENTRY: Final = struct.Struct(
    ">i"  # keyHash
    "q"  # phyOffset
    "i"  # timeDiff (seconds)
    "i"  # prevIndex
)
INDEX_ENTRY_SIZE: Final = INDEX_ENTRY.size  # 20
_SLOT = struct.Struct(">i")
_pack_entry = INDEX_ENTRY.pack_into
_FIRST: Final = operator.itemgetter(0)
_INT_MAX: Final = 0x7FFFFFFF
_NO_END: Final = 2**63 - 1


def index_key_hash(key: str) -> int:
    """``abs(String.hashCode(key))`` with Java's ``abs(MIN_VALUE)`` (still negative) as 0."""
    value = java_string_hash(key)
    return 0 if value == -0x80000000 else abs(value)


_TAIL_SHIFT: Final = 31**4  # the tail is the last 4 characters
_MAX_HEADS: Final = 1024


class UniqKeyHasher:
    """``index_key_hash(f"{topic}#{uniq_key}")`` without hashing the whole key each time.

    Generated uniq keys of one millisecond share all but their last 4 characters (the
    counter). Java's hash is linear, so ``h(head + tail) = h(head) * 31**4 + h(tail)``
    (mod 2**32): the head's hash is remembered, only the 4-character tail is hashed.
    """

    def __init__(self) -> None:
        self._heads: dict[tuple[str, str], int] = {}

    def __call__(self, topic: str, uniq_key: str) -> int:
        tail = uniq_key[-4:].encode()
        if len(tail) != 4 or len(uniq_key) <= 4:  # short, or not ASCII at the end
            return index_key_hash(f"{topic}#{uniq_key}")
        head = (topic, uniq_key[:-4])
        heads = self._heads
        head_hash = heads.get(head)
        if head_hash is None:
            if len(heads) >= _MAX_HEADS:
                heads.clear()
            head_hash = heads[head] = java_string_hash(f"{topic}#{head[1]}") & 0xFFFFFFFF
        c0, c1, c2, c3 = tail
        h = (head_hash * _TAIL_SHIFT + c0 * 29791 + c1 * 961 + c2 * 31 + c3) & 0xFFFFFFFF
        if h == 0x80000000:  # Java's abs(MIN_VALUE), see index_key_hash
            return 0
        return 0x100000000 - h if h & 0x80000000 else h

    def many(self, topic: str, uniq_keys: list[str]) -> list[int]:
        """The hash of each key of a batch: keys of one millisecond share their head, so the
        head is looked up once per run of keys, not once per key; a batch whose keys all
        share one ASCII head (one send's) is hashed by C calls mapped over the keys."""
        first = uniq_keys[0] if uniq_keys else ""
        size = len(first)
        if size > 4 and first.isascii():
            head = first[:-4]
            if (
                "".join(uniq_keys).isascii()
                and list(map(len, uniq_keys)).count(size) == len(uniq_keys)
                and all(map(str.startswith, uniq_keys, repeat(head)))
            ):
                self(topic, first)  # remembers the head's hash
                return _same_head_hashes(self._heads[(topic, head)] * _TAIL_SHIFT, uniq_keys)
        hashes: list[int] = []
        add = hashes.append
        head = ""
        head_size = -5  # no head yet: no key is head_size + 4 long
        shifted = 0
        for uniq_key in uniq_keys:
            tail = uniq_key[-4:].encode()
            if len(uniq_key) != head_size + 4 or len(tail) != 4 or not uniq_key.startswith(head):
                add(self(topic, uniq_key))  # a new head (or a key with none: short, not ASCII)
                if len(tail) == 4 and len(uniq_key) > 4:
                    head, head_size = uniq_key[:-4], len(uniq_key) - 4
                    shifted = self._heads[(topic, head)] * _TAIL_SHIFT
                continue
            c0, c1, c2, c3 = tail
            h = (shifted + c0 * 29791 + c1 * 961 + c2 * 31 + c3) & 0xFFFFFFFF
            add(0 if h == 0x80000000 else 0x100000000 - h if h & 0x80000000 else h)
        return hashes


class _PairHashes(dict[str, int]):
    """Two characters → their part of a Java hash (``c0 * 31 + c1``), worked out when first
    asked for; a few hundred pairs at most for hex keys."""

    def __missing__(self, pair: str) -> int:
        if len(self) >= _MAX_PAIRS:
            self.clear()
        value = self[pair] = ord(pair[0]) * 31 + ord(pair[1])
        return value


_MAX_PAIRS: Final = 4096
_PAIRS: Final = _PairHashes()
_HIGH_PAIR: Final = operator.itemgetter(slice(-4, -2))
_LOW_PAIR: Final = operator.itemgetter(slice(-2, None))


def _same_head_hashes(shifted: int, uniq_keys: list[str]) -> list[int]:
    """``index_key_hash`` of each key, all with one ASCII head whose hash times ``31**4`` is
    ``shifted``: ``h(head) * 31**4 + h(tail)`` mod 2**32 by C calls mapped over the keys
    (the tail's hash from its two pairs), as a signed int, then its absolute value; Java's
    ``abs(MIN_VALUE)`` becomes 0 as in :func:`index_key_hash`."""
    count = len(uniq_keys)
    tails = map(
        operator.add,
        map(operator.mul, map(_PAIRS.__getitem__, map(_HIGH_PAIR, uniq_keys)), repeat(961)),
        map(_PAIRS.__getitem__, map(_LOW_PAIR, uniq_keys)),
    )
    hashes = map(operator.and_, map(operator.add, repeat(shifted), tails), repeat(0xFFFFFFFF))
    signed = struct.unpack(f"{count}i", struct.pack(f"{count}I", *hashes))
    found = list(map(abs, signed))
    if _MIN_ABS in found:
        found = [0 if value == _MIN_ABS else value for value in found]
    return found


_MIN_ABS: Final = 0x80000000  # abs(Java's MIN_VALUE) as Python computes it


class KeyHasher:
    """``index_key_hash(f"{topic}#{key}")`` with the hash of ``topic#`` remembered, so only
    the key is hashed (business keys are nearly always new: no cache of whole keys)."""

    def __init__(self) -> None:
        self._prefixes: dict[str, int] = {}

    def __call__(self, topic: str, key: str) -> int:
        prefix_hash = self._prefixes.get(topic)
        if prefix_hash is None:
            if len(self._prefixes) >= _MAX_HEADS:
                self._prefixes.clear()
            prefix_hash = self._prefixes[topic] = java_string_hash(f"{topic}#") & 0xFFFFFFFF
        value = java_string_hash_after(prefix_hash, key)
        return 0 if value == -0x80000000 else abs(value)


ROCKETMQ_HASH_SLOT_NUM: Final = 5_000_000
ROCKETMQ_MAX_INDEX_NUM: Final = 20_000_000


class IndexFileSizeError(StoreLoadError):
    """An index file's size fits neither the configured geometry nor RocketMQ's default."""


def index_file_size(hash_slot_num: int, max_index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + max_index_num * INDEX_ENTRY_SIZE


def index_geometry(
    path: Path, size: int, hash_slot_num: int, max_index_num: int
) -> tuple[int, int]:
    """(hash slots, max entries) of an existing index file of ``size`` bytes.

    The configured geometry if the size matches it, else RocketMQ's default if that
    matches; otherwise :class:`IndexFileSizeError` naming the settings and both sizes.
    """
    for slots, entries in (
        (hash_slot_num, max_index_num),
        (ROCKETMQ_HASH_SLOT_NUM, ROCKETMQ_MAX_INDEX_NUM),
    ):
        if size == index_file_size(slots, entries):
            return slots, entries
    raise IndexFileSizeError(
        f"index file {path} is {size} bytes, but max_hash_slot_num={hash_slot_num} and "
        f"max_index_num={max_index_num} make {index_file_size(hash_slot_num, max_index_num)}"
        f"-byte files (and RocketMQ's defaults, {ROCKETMQ_HASH_SLOT_NUM} and "
        f"{ROCKETMQ_MAX_INDEX_NUM}, make "
        f"{index_file_size(ROCKETMQ_HASH_SLOT_NUM, ROCKETMQ_MAX_INDEX_NUM)}); set "
        "max_hash_slot_num and max_index_num to the values the file was written with"
    )


class IndexFile:
    """One mapped index file; entries are appended until ``max_index_num - 1`` are in.

    A new file gets the given geometry; an existing one keeps its own (:func:`index_geometry`).
    """

    def __init__(
        self, path: Path, hash_slot_num: int, max_index_num: int, *, create: bool = False
    ) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o644)
        try:
            if not create:
                size = os.fstat(fd).st_size
                hash_slot_num, max_index_num = index_geometry(
                    path, size, hash_slot_num, max_index_num
                )
            self.hash_slot_num = hash_slot_num
            self.max_index_num = max_index_num
            self.file_size = index_file_size(hash_slot_num, max_index_num)
            if create:
                _reserve(fd, self.file_size)
            self.buffer = mmap.mmap(fd, self.file_size, access=mmap.ACCESS_WRITE)
        except BaseException:
            if create:
                path.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)
        header = [int(v) for v in INDEX_HEADER.unpack_from(self.buffer, 0)]
        self.begin_timestamp: int = header[0]
        self.end_timestamp: int = header[1]
        self.begin_phy_offset: int = header[2]
        self.end_phy_offset: int = header[3]
        self.hash_slot_count: int = header[4]
        self.index_count: int = header[5]
        if self.index_count <= 0:
            self.index_count = 1
        self._entries_at = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE

    def __repr__(self) -> str:
        return f"IndexFile({self.path.name}, entries={self.index_count - 1})"

    @property
    def is_full(self) -> bool:
        return self.index_count >= self.max_index_num

    def write_header(self) -> None:
        """Put the header in the mapping. Done on flush, seal and close, not per entry: after
        an unclean exit every file newer than the checkpoint is dropped and rebuilt, and a
        file only gets older than the checkpoint when it is sealed (with its header)."""
        self._write_header()

    def _write_header(self) -> None:
        INDEX_HEADER.pack_into(
            self.buffer,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def put(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add one key; False when the file is full."""
        return self.put_hash(index_key_hash(key), phy_offset, store_timestamp)

    def put_hash(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Add one entry for an already hashed key; False when the file is full."""
        count = self.index_count
        if count >= self.max_index_num:
            return False
        buffer = self.buffer
        slot_at = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        previous = _SLOT.unpack_from(buffer, slot_at)[0]
        if previous <= 0 or previous > count:
            previous = 0
            self.hash_slot_count += 1
        if count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        time_diff = 0
        if self.begin_timestamp > 0:
            time_diff = min(_INT_MAX, max(0, (store_timestamp - self.begin_timestamp) // 1000))
        entry_at = self._entries_at + count * INDEX_ENTRY_SIZE
        _pack_entry(buffer, entry_at, key_hash, phy_offset, time_diff, previous)
        _SLOT.pack_into(buffer, slot_at, count)
        self.index_count = count + 1
        self.end_phy_offset = phy_offset
        # A committed transaction keeps its half's (older) store time: never move back.
        self.end_timestamp = max(self.end_timestamp, store_timestamp)
        return True

    def put_hashes(self, entries: list[tuple[int, int]], store_timestamp: int) -> int:
        """Add (key hash, physical offset) entries of one store time, as :meth:`put_hash`
        each, in one loop; returns how many went in (fewer when the file fills up)."""
        if not entries:
            return 0
        count = self.index_count
        room = self.max_index_num - count
        if room <= 0:
            return 0
        if room < len(entries):
            entries = entries[:room]
        if count <= 1:
            self.begin_phy_offset = entries[0][1]
            self.begin_timestamp = store_timestamp
        time_diff = 0
        if self.begin_timestamp > 0:
            time_diff = min(_INT_MAX, max(0, (store_timestamp - self.begin_timestamp) // 1000))
        buffer = self.buffer
        slots = self.hash_slot_num
        unpack_slot = _SLOT.unpack_from
        pack_slot = _SLOT.pack_into
        entry_at = self._entries_at + count * INDEX_ENTRY_SIZE
        hashes, offsets = zip(*entries, strict=True)
        slot_ats = [INDEX_HEADER_SIZE + HASH_SLOT_SIZE * (h % slots) for h in hashes]
        if len(set(slot_ats)) == len(slot_ats):  # no two in one slot: the same, mapped
            numbers = range(count, count + len(entries))
            found = map(_FIRST, map(unpack_slot, repeat(buffer), slot_ats))
            links = [p if 0 < p <= n else 0 for p, n in zip(found, numbers, strict=True)]
            entries_end = entry_at + INDEX_ENTRY_SIZE * len(entries)
            time_diffs = [time_diff] * len(links)
            buffer[entry_at:entries_end] = pack_rows(
                INDEX_ENTRY, (hashes, offsets, time_diffs, links)
            )
            deque(map(pack_slot, repeat(buffer), slot_ats, numbers), maxlen=0)
            self._entries_put(links.count(0), numbers.stop, offsets[-1], store_timestamp)
            return len(entries)
        new_slots = 0
        for key_hash, phy_offset in entries:
            slot_at = INDEX_HEADER_SIZE + (key_hash % slots) * HASH_SLOT_SIZE
            previous = unpack_slot(buffer, slot_at)[0]
            if previous <= 0 or previous > count:
                previous = 0
                new_slots += 1
            _pack_entry(buffer, entry_at, key_hash, phy_offset, time_diff, previous)
            pack_slot(buffer, slot_at, count)
            count += 1
            entry_at += INDEX_ENTRY_SIZE
        self._entries_put(new_slots, count, entries[-1][1], store_timestamp)
        return len(entries)

    def _entries_put(
        self, new_slots: int, count: int, end_phy_offset: int, store_timestamp: int
    ) -> None:
        self.hash_slot_count += new_slots
        self.index_count = count
        self.end_phy_offset = end_phy_offset
        self.end_timestamp = max(self.end_timestamp, store_timestamp)

    def overlaps(self, begin: int, end: int) -> bool:
        return self.begin_timestamp <= end and self.end_timestamp >= begin

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Offsets of entries whose hash matches ``key`` and whose time is in [begin, end]."""
        return self.select_hash(index_key_hash(key), max_num, begin, end)

    def select_hash(self, key_hash: int, max_num: int, begin: int, end: int = _NO_END) -> list[int]:
        """Offsets of entries with hash ``key_hash`` whose time is in [begin, end], newest
        first (a slot's entries are linked newest to oldest)."""
        if self.index_count <= 1:
            return []
        buffer = self.buffer
        slot_at = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        number = _SLOT.unpack_from(buffer, slot_at)[0]
        limit = self.index_count
        entries_at = self._entries_at
        begin_timestamp = self.begin_timestamp
        unpack = INDEX_ENTRY.unpack_from
        found: list[int] = []
        # A slot's list runs from its newest entry to older ones: numbers fall strictly (a
        # damaged file cannot make the walk loop).
        while 0 < number < limit and len(found) < max_num:
            entry_hash, phy_offset, time_diff, previous = unpack(
                buffer, entries_at + number * INDEX_ENTRY_SIZE
            )
            stamp = begin_timestamp + time_diff * 1000
            if stamp < begin:
                break
            if entry_hash == key_hash and stamp <= end:
                found.append(phy_offset)
            if previous >= number:
                break
            number = previous
        return found

    def flush(self) -> None:
        self._write_header()
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        if not self.buffer.closed:
            self._write_header()
            self.buffer.close()

    def destroy(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
