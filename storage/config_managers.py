"""RocketMQ's broker config files under ``<root>/config/``, one small manager per file.

==========================  =========================  ========================================
Manager                     File                       Shape
==========================  =========================  ========================================
ConsumerOffsetManager       ``consumerOffset.json``    ``{"offsetTable": {"<topic>@<group>":
                                                       {"<queueId>": <nextOffset>}},
                                                       "commitTimeTable": <same shape, ms>}``
TopicConfigManager          ``topics.json``            ``{"dataVersion": {...},
                                                       "topicConfigTable": {"<topic>": {...}}}``
SubscriptionGroupManager    ``subscriptionGroup.json`` ``{"dataVersion": {...},
                                                       "subscriptionGroupTable": {"<group>":
                                                       {...}}}``
DelayOffsetManager          ``delayOffset.json``       ``{"offsetTable": {"<level>": <next>}}``
==========================  =========================  ========================================

Each manager holds its table in memory behind a lock; ``load()`` reads the file (falling back
to ``.bak``, see :mod:`storage.json_file`) and ``persist()`` writes it with one ``save_json``
call. Files are written as valid JSON with quoted keys and RocketMQ's camelCase field names;
reading accepts RocketMQ's own files (unquoted integer keys, extra keys such as ``attributes``
or ``stateVersion``, which are ignored). A missing field takes its default. A file whose shape
is wrong (a list where an object belongs, text where a number belongs) raises
:class:`~storage.errors.ConfigFileError` naming the file.

Topics and subscription groups are durable when a change returns, as in RocketMQ, but a
change is one line appended to the file's journal (:mod:`storage.config_journal`, group
committed); the file itself is rewritten once the journal holds changes for half as many
entries as the table has, and by ``persist_if_dirty`` when the broker stops. Consumer and
delay offsets change constantly and are persisted by a periodic task, which can skip a clean
table (``dirty`` / ``persist_if_dirty``). Whole-file writes are coalesced: one at a time, and a
caller whose change the write in flight already carries does not write again.
"""

from __future__ import annotations

import bisect
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final, Generic, TypeVar

from storage.config_journal import ConfigJournal
from storage.config_records import (
    CONSUME_FROM_EARLIEST,
    CONSUME_FROM_LATEST,
    CONSUME_MODE_OFFSETS,
    CONSUME_MODE_POP,
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    SCHEDULE_TOPIC_QUEUE_NUMS,
    DataVersion,
    SubscriptionGroupConfig,
    TopicConfig,
    TopicGroup,
    camel,
    decode_record,
    record_to_json,
)
from storage.errors import ConfigFileError
from storage.json_file import (
    TOPIC_GROUP_SEPARATOR,
    as_object,
    decode_int_map,
    decode_topic_group_table,
    load_config,
    save_json,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "CONSUME_FROM_EARLIEST",
    "CONSUME_FROM_LATEST",
    "CONSUME_MODE_OFFSETS",
    "CONSUME_MODE_POP",
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "SCHEDULE_TOPIC",
    "SCHEDULE_TOPIC_QUEUE_NUMS",
    "TOPIC_GROUP_SEPARATOR",
    "ConsumerOffsetManager",
    "DataVersion",
    "DelayOffsetManager",
    "SubscriptionGroupConfig",
    "SubscriptionGroupManager",
    "TopicConfig",
    "TopicConfigManager",
    "TopicGroup",
]

_R = TypeVar("_R", bound="DataclassInstance")

JOURNAL_MIN_ENTRIES: Final = 64
"""A journal shorter than this never makes the file be rewritten (small tables)."""


def _system_now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- managers


class _ConfigFile(ABC):
    """One config file: an in-memory table, a lock, load() and persist()."""

    file_name: ClassVar[str]
    _journal: ConfigJournal | None = None  # the changes since the file was last written

    def __init__(self, config_dir: Path, *, now_ms: Callable[[], int] = _system_now_ms) -> None:
        self._path = config_dir / self.file_name
        self._now_ms = now_ms
        self._lock = threading.Lock()  # guards the table and the dirty flag
        # Held across snapshot + save so that an older snapshot never overwrites a newer one.
        self._persist_lock = threading.Lock()
        self._dirty = False
        self._changes = 0  # changes made in memory
        self._saved_changes = 0  # of those, how many the file holds

    @property
    def path(self) -> Path:
        """The config file's path."""
        return self._path

    @property
    def dirty(self) -> bool:
        """Whether the table changed since the last load() or persist()."""
        with self._lock:
            return self._dirty

    def load(self) -> None:
        """Replace the in-memory table with the file's content (or ``.bak``'s, or defaults).

        Raises ConfigFileError when the file and its backup are unreadable or the content does
        not have the expected shape.
        """
        root = load_config(self._path)
        try:
            with self._lock:
                self._decode(root)
                self._dirty = False
        except (ValueError, TypeError) as exc:
            raise ConfigFileError(f"config file {self._path}: {exc}") from exc

    def persist(self) -> None:
        """Write the table to the file (one save_json call) and clear the dirty flag.

        Coalesced: one write at a time; when a write that started after this call's last
        change has finished, there is nothing left to write."""
        with self._lock:
            wanted = self._changes
        with self._persist_lock:
            if self._saved_changes >= wanted and not self._dirty:
                return
            with self._lock:
                snapshot = self._encode()
                covered = self._changes
                self._dirty = False
                self._before_save()
            try:
                save_json(self._path, snapshot)
            except BaseException:
                # Still unsaved: the next periodic persist must not skip it.
                with self._lock:
                    self._dirty = True
                raise
            self._saved_changes = covered
            self._after_save()

    def _mark_changed(self) -> None:
        """Note a change of the table (called with the lock held)."""
        self._changes += 1
        self._dirty = True

    def _before_save(self) -> None:
        """With the lock held, with the snapshot of a whole-file write: start a new journal."""
        if self._journal is not None:
            self._journal.rotate()

    def _after_save(self) -> None:
        """Once a whole-file write is durable: the journal it replaces is not needed."""
        if self._journal is not None:
            self._journal.drop_old()

    def to_json(self) -> dict[str, object]:
        """The file's content as it would be written now (a master sends it to slaves)."""
        with self._lock:
            return self._encode()

    def replace_from_json(self, root: Mapping[str, object]) -> None:
        """Take a master's content as the table and write it (a slave's config sync).

        ValueError when the content does not have the file's shape; nothing changes then.
        """
        with self._persist_lock:
            with self._lock:
                previous = self._encode()
                try:
                    self._decode(root)
                except (ValueError, TypeError) as exc:
                    self._decode(previous)
                    raise ValueError(f"config {self.file_name}: {exc}") from exc
                snapshot = self._encode()
                self._dirty = False
                self._before_save()
            save_json(self._path, snapshot)
            self._after_save()

    def persist_if_dirty(self) -> bool:
        """Persist only if the table changed; return whether it did."""
        if not self.dirty:
            return False
        self.persist()
        return True

    @abstractmethod
    def _decode(self, root: Mapping[str, object]) -> None:
        """Replace the table from the file's top-level object (called with the lock held)."""

    @abstractmethod
    def _encode(self) -> dict[str, object]:
        """The file's top-level object (called with the lock held)."""


class ConsumerOffsetManager(_ConfigFile):
    """Committed consumer offsets ("next offset to consume") per group, topic and queue.

    Besides RocketMQ's ``offsetTable``, the file carries ``commitTimeTable`` (same shape, the
    ms time of each queue's last commit) for the lag report; RocketMQ ignores unknown keys.
    """

    file_name = "consumerOffset.json"

    def __init__(self, config_dir: Path, *, now_ms: Callable[[], int] = _system_now_ms) -> None:
        super().__init__(config_dir, now_ms=now_ms)
        self._offsets: dict[TopicGroup, dict[int, int]] = {}
        self._commit_times: dict[TopicGroup, dict[int, int]] = {}

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store ``offset`` as the group's next offset; a smaller value is accepted too."""
        key = _topic_group(topic, group)
        now = self._now_ms()
        with self._lock:
            self._set_offset(key, queue_id, offset)
            self._commit_times.setdefault(key, {})[queue_id] = now

    def pin_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store where a group starts on a queue it never committed (its first read): an
        offset with no commit time, since nobody committed it."""
        with self._lock:
            self._set_offset(_topic_group(topic, group), queue_id, offset)

    def _set_offset(self, key: TopicGroup, queue_id: int, offset: int) -> None:
        """Under the lock: the offset, and the table marked for the next persist."""
        self._offsets.setdefault(key, {})[queue_id] = offset
        self._dirty = True

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed next offset, or -1 when the group never committed on that queue."""
        with self._lock:
            return self._offsets.get(TopicGroup(topic, group), {}).get(queue_id, -1)

    def offsets_of(self, group: str, topic: str) -> dict[int, int]:
        """Committed offsets of every queue of ``topic``, by queue id (a copy)."""
        with self._lock:
            return dict(sorted(self._offsets.get(TopicGroup(topic, group), {}).items()))

    def commit_times_of(self, group: str, topic: str) -> dict[int, int]:
        """Last commit time in ms of every queue of ``topic``, by queue id (a copy)."""
        with self._lock:
            return dict(sorted(self._commit_times.get(TopicGroup(topic, group), {}).items()))

    def groups(self) -> list[str]:
        """Every group with a committed offset, sorted."""
        with self._lock:
            return sorted({key.group for key in self._offsets})

    def topic_groups(self) -> list[TopicGroup]:
        """Every (topic, group) pair with a committed offset, sorted."""
        with self._lock:
            return sorted(self._offsets)

    def remove_group(self, group: str) -> bool:
        """Forget every offset of ``group``; return whether there were any."""
        return self._remove(lambda key: key.group == group)

    def remove_topic(self, topic: str) -> bool:
        """Forget every group's offsets on ``topic``; return whether there were any."""
        return self._remove(lambda key: key.topic == topic)

    def _remove(self, doomed: Callable[[TopicGroup], bool]) -> bool:
        with self._lock:
            keys = [key for key in self._offsets.keys() | self._commit_times.keys() if doomed(key)]
            for key in keys:
                self._offsets.pop(key, None)
                self._commit_times.pop(key, None)
            self._dirty = self._dirty or bool(keys)
            return bool(keys)

    def _decode(self, root: Mapping[str, object]) -> None:
        offsets = _decode_topic_group_table(root.get("offsetTable", {}), "offsetTable")
        times = _decode_topic_group_table(root.get("commitTimeTable", {}), "commitTimeTable")
        self._offsets, self._commit_times = offsets, times

    def _encode(self) -> dict[str, object]:
        return {
            "offsetTable": _encode_topic_group_table(self._offsets),
            "commitTimeTable": _encode_topic_group_table(self._commit_times),
        }


class _VersionedTable(_ConfigFile, Generic[_R]):
    """A name -> record table with a DataVersion, persisted on every change."""

    table_key: ClassVar[str]
    name_field: ClassVar[str]

    def __init__(self, config_dir: Path, *, now_ms: Callable[[], int] = _system_now_ms) -> None:
        super().__init__(config_dir, now_ms=now_ms)
        self._table: dict[str, _R] = self._built_ins()
        self._data_version = DataVersion(0, now_ms())
        self._journal: ConfigJournal = ConfigJournal(self._path)
        self._names: list[str] | None = None  # sorted, once asked for

    def load(self) -> None:
        """The file (see :meth:`_ConfigFile.load`), then the changes journaled since."""
        super().load()
        entries = self._journal.read()
        try:
            with self._lock:
                for entry in entries:
                    self._replay(entry)
                self._dirty = bool(entries)
        except (ValueError, TypeError) as exc:
            raise ConfigFileError(f"config journal {self._journal.path}: {exc}") from exc

    @property
    def data_version(self) -> DataVersion:
        """The current version stamp."""
        with self._lock:
            return self._data_version

    def get(self, name: str) -> _R | None:
        """The entry called ``name``, or None."""
        with self._lock:
            return self._table.get(name)

    def all(self) -> list[_R]:
        """Every entry, sorted by name."""
        with self._lock:
            return [self._table[name] for name in self._sorted_names()]

    def page(self, after: str | None, limit: int) -> tuple[list[_R], int]:
        """At most ``limit`` entries named after ``after`` (from the first when None), in
        name order, and how many entries there are: a bisection, not a listing."""
        with self._lock:
            names = self._sorted_names()
            start = 0 if after is None else bisect.bisect_right(names, after)
            return [self._table[name] for name in names[start : start + limit]], len(names)

    def _sorted_names(self) -> list[str]:
        """The names in order (called with the lock held); sorted again after a change
        that added or removed one."""
        if self._names is None:
            self._names = sorted(self._table)
        return self._names

    def put(self, record: _R) -> None:
        """Add or replace an entry; returns once the change is durable."""
        with self._lock:
            name = getattr(record, self.name_field)
            if name not in self._table:
                self._names = None
            self._table[name] = record
            ticket = self._journal_change("put", record_to_json(record))
        self._sync(ticket)

    def delete(self, name: str) -> bool:
        """Remove an entry; returns (whether it existed) once the change is durable."""
        with self._lock:
            if self._table.pop(name, None) is None:
                return False
            self._names = None
            ticket = self._journal_change("delete", name)
        self._sync(ticket)
        return True

    def _journal_change(self, kind: str, value: object) -> int:
        """Bump the data version and journal the change (called with the lock held, so
        that journal order is change order)."""
        self._data_version = self._data_version.next(self._now_ms())
        self._mark_changed()
        entry = {"dataVersion": record_to_json(self._data_version), kind: value}
        return self._journal.append(entry)

    def _sync(self, ticket: int) -> None:
        """Make the journal durable up to ``ticket``; rewrite the file once the journal
        holds changes for half the table's size (O(1) a change, amortised)."""
        self._journal.sync(ticket)
        if self._journal.entries > max(JOURNAL_MIN_ENTRIES, len(self._table) // 2):
            self.persist()

    def _replay(self, entry: Mapping[str, object]) -> None:
        self._names = None
        version = as_object(entry.get("dataVersion", {}), "dataVersion")
        self._data_version = decode_record(self._data_version, version, "dataVersion")
        if "put" in entry:
            fields = as_object(entry["put"], "put")
            name = str(fields.get(camel(self.name_field), ""))
            self._table[name] = decode_record(self._new(name), fields, "put", skip="")
        elif "delete" in entry:
            self._table.pop(str(entry["delete"]), None)

    def _built_ins(self) -> dict[str, _R]:
        """Entries present even without a file (the file's entries override them)."""
        return {}

    @abstractmethod
    def _new(self, name: str) -> _R:
        """A record with every field at its default."""

    def _decode(self, root: Mapping[str, object]) -> None:
        version_data = as_object(root.get("dataVersion", {}), "dataVersion")
        version = decode_record(DataVersion(0, self._now_ms()), version_data, "dataVersion")
        table = self._built_ins()
        for name, entry in as_object(root.get(self.table_key, {}), self.table_key).items():
            what = f"{self.table_key}[{name!r}]"
            # The map key names the entry, as RocketMQ's lookups do; a stale inner name loses.
            fields = as_object(entry, what)
            table[name] = decode_record(self._new(name), fields, what, skip=self.name_field)
        self._table, self._data_version = table, version
        self._names = None

    def _encode(self) -> dict[str, object]:
        return {
            "dataVersion": record_to_json(self._data_version),
            self.table_key: {
                name: record_to_json(self._table[name]) for name in sorted(self._table)
            },
        }


class TopicConfigManager(_VersionedTable[TopicConfig]):
    """Topic configs (topics.json). The schedule topic always exists, as in RocketMQ."""

    file_name = "topics.json"
    table_key = "topicConfigTable"
    name_field = "topic_name"

    def _built_ins(self) -> dict[str, TopicConfig]:
        schedule = TopicConfig(
            SCHEDULE_TOPIC,
            read_queue_nums=SCHEDULE_TOPIC_QUEUE_NUMS,
            write_queue_nums=SCHEDULE_TOPIC_QUEUE_NUMS,
            perm=PERM_READ | PERM_WRITE,
        )
        return {SCHEDULE_TOPIC: schedule}

    def _new(self, name: str) -> TopicConfig:
        return TopicConfig(name)


class SubscriptionGroupManager(_VersionedTable[SubscriptionGroupConfig]):
    """Consumer group configs (subscriptionGroup.json)."""

    file_name = "subscriptionGroup.json"
    table_key = "subscriptionGroupTable"
    name_field = "group_name"

    def get_or_create(self, group: str) -> SubscriptionGroupConfig:
        """The group's config; a new group gets the defaults and is persisted at once."""
        with self._lock:
            existing = self._table.get(group)
            if existing is not None:
                return existing
            created = SubscriptionGroupConfig(group)
            self._table[group] = created
            self._names = None
            ticket = self._journal_change("put", record_to_json(created))
        self._sync(ticket)
        return created

    def _new(self, name: str) -> SubscriptionGroupConfig:
        return SubscriptionGroupConfig(name)


class DelayOffsetManager(_ConfigFile):
    """Per delay level, the next offset to deliver in SCHEDULE_TOPIC queue ``level - 1``."""

    file_name = "delayOffset.json"

    def __init__(self, config_dir: Path, *, now_ms: Callable[[], int] = _system_now_ms) -> None:
        super().__init__(config_dir, now_ms=now_ms)
        self._offsets: dict[int, int] = {}

    def get(self, level: int) -> int:
        """The next offset to deliver for ``level`` (0 when never delivered)."""
        with self._lock:
            return self._offsets.get(level, 0)

    def update(self, level: int, offset: int) -> None:
        """Record that ``level`` has delivered everything before ``offset``."""
        if level < 1:
            raise ValueError(f"delay levels start at 1, not {level}")
        with self._lock:
            self._offsets[level] = offset
            self._dirty = True

    def table(self) -> dict[int, int]:
        """Every level's next offset, by level (a copy)."""
        with self._lock:
            return dict(sorted(self._offsets.items()))

    def _decode(self, root: Mapping[str, object]) -> None:
        self._offsets = decode_int_map(root.get("offsetTable", {}), "offsetTable")

    def _encode(self) -> dict[str, object]:
        return {"offsetTable": _encode_int_map(self._offsets)}


# ---------------------------------------------------------------- encoding helpers


def _topic_group(topic: str, group: str) -> TopicGroup:
    """The table key; a separator inside a name would split differently on reload."""
    for kind, name in (("topic", topic), ("group", group)):
        if not name or TOPIC_GROUP_SEPARATOR in name:
            raise ValueError(f"{kind} name {name!r} is empty or contains {TOPIC_GROUP_SEPARATOR!r}")
    return TopicGroup(topic, group)


def _encode_topic_group_table(
    table: Mapping[TopicGroup, Mapping[int, int]],
) -> dict[str, dict[str, int]]:
    return {key.key(): _encode_int_map(table[key]) for key in sorted(table)}


def _decode_topic_group_table(value: object, what: str) -> dict[TopicGroup, dict[int, int]]:
    return {
        TopicGroup(*key): queues for key, queues in decode_topic_group_table(value, what).items()
    }


def _encode_int_map(table: Mapping[int, int]) -> dict[str, int]:
    return {str(key): table[key] for key in sorted(table)}
