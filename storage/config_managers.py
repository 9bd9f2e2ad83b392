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

Topics and subscription groups persist on every change, as RocketMQ does; consumer and delay
offsets change constantly and are persisted by a periodic task, which can skip a clean table
(``dirty`` / ``persist_if_dirty``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Final, Generic, NamedTuple, TypeVar

from storage.delay_levels import SCHEDULE_TOPIC as DELAY_SCHEDULE_TOPIC
from storage.errors import ConfigFileError
from storage.json_file import (
    TOPIC_GROUP_SEPARATOR,
    as_int,
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

SCHEDULE_TOPIC: Final = DELAY_SCHEDULE_TOPIC
"""The system topic holding delayed messages; queue id = delay level - 1."""
SCHEDULE_TOPIC_QUEUE_NUMS = 18

# PermName bits.
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1

CONSUME_FROM_EARLIEST = "earliest"
CONSUME_FROM_LATEST = "latest"
CONSUME_MODE_OFFSETS = "offsets"
CONSUME_MODE_POP = "pop"
CONSUME_MODES = frozenset({"", CONSUME_MODE_OFFSETS, CONSUME_MODE_POP})

_R = TypeVar("_R", bound="DataclassInstance")


def _system_now_ms() -> int:
    return time.time_ns() // 1_000_000


# ---------------------------------------------------------------- records


@dataclasses.dataclass(frozen=True, slots=True)
class DataVersion:
    """Version stamp of topics.json and subscriptionGroup.json (RocketMQ ``DataVersion``)."""

    counter: int = 0  # bumped on every change
    timestamp: int = 0  # ms of the last change

    def next(self, now_ms: int) -> DataVersion:
        """The version after one more change made at ``now_ms``."""
        return DataVersion(self.counter + 1, now_ms)


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfig:
    """One topic's entry in topics.json (RocketMQ ``TopicConfig``)."""

    topic_name: str
    read_queue_nums: int = 8  # queues consumers read from
    write_queue_nums: int = 8  # queues producers write to
    perm: int = PERM_READ | PERM_WRITE  # PermName bits
    topic_filter_type: str = "SINGLE_TAG"  # or "MULTI_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    @property
    def is_readable(self) -> bool:
        """Whether consumers may pull from the topic."""
        return bool(self.perm & PERM_READ)

    @property
    def is_writeable(self) -> bool:
        """Whether producers may send to the topic."""
        return bool(self.perm & PERM_WRITE)


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """One consumer group's entry in subscriptionGroup.json (RocketMQ fields + ``consumeFrom``).

    ``consume_from`` (our extension) says where a group that never committed an offset starts:
    ``"earliest"``, ``"latest"``, or a decimal ms timestamp string.
    """

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16  # deliveries before the message goes to %DLQ%<group>
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    consume_from: str = CONSUME_FROM_EARLIEST
    # Our extensions for POP consumption: "" (not chosen yet), "offsets" or "pop"; and
    # whether a POP group delivers each queue in order.
    consume_mode: str = ""
    fifo: bool = False

    def __post_init__(self) -> None:
        if self.consume_mode not in CONSUME_MODES:
            raise ValueError(
                f"consume_mode must be '', 'offsets' or 'pop', not {self.consume_mode!r}"
            )
        if self.consume_from_timestamp is None and self.consume_from not in (
            CONSUME_FROM_EARLIEST,
            CONSUME_FROM_LATEST,
        ):
            raise ValueError(
                f"consume_from must be 'earliest', 'latest' or a ms timestamp, "
                f"not {self.consume_from!r}"
            )

    @property
    def consume_from_timestamp(self) -> int | None:
        """The start timestamp in ms when ``consume_from`` is one, else None."""
        value = self.consume_from
        return int(value) if value.isascii() and value.isdigit() else None


class TopicGroup(NamedTuple):
    """A (topic, group) pair: one ``"<topic>@<group>"`` key of consumerOffset.json."""

    topic: str
    group: str

    def key(self) -> str:
        """The consumerOffset.json key."""
        return f"{self.topic}{TOPIC_GROUP_SEPARATOR}{self.group}"


# ---------------------------------------------------------------- managers


class _ConfigFile(ABC):
    """One config file: an in-memory table, a lock, load() and persist()."""

    file_name: ClassVar[str]

    def __init__(self, config_dir: Path, *, now_ms: Callable[[], int] = _system_now_ms) -> None:
        self._path = config_dir / self.file_name
        self._now_ms = now_ms
        self._lock = threading.Lock()  # guards the table and the dirty flag
        # Held across snapshot + save so that an older snapshot never overwrites a newer one.
        self._persist_lock = threading.Lock()
        self._dirty = False

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
        """Write the table to the file (one save_json call) and clear the dirty flag."""
        with self._persist_lock:
            with self._lock:
                snapshot = self._encode()
                self._dirty = False
            try:
                save_json(self._path, snapshot)
            except BaseException:
                # Still unsaved: the next periodic persist must not skip it.
                with self._lock:
                    self._dirty = True
                raise

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
            save_json(self._path, snapshot)

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
            self._offsets.setdefault(key, {})[queue_id] = offset
            self._commit_times.setdefault(key, {})[queue_id] = now
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
            return [self._table[name] for name in sorted(self._table)]

    def put(self, record: _R) -> None:
        """Add or replace an entry, bump the data version and persist."""
        with self._lock:
            self._table[getattr(record, self.name_field)] = record
            self._bump()
        self.persist()

    def delete(self, name: str) -> bool:
        """Remove an entry, bump the data version and persist; return whether it existed."""
        with self._lock:
            if self._table.pop(name, None) is None:
                return False
            self._bump()
        self.persist()
        return True

    def _bump(self) -> None:
        self._data_version = self._data_version.next(self._now_ms())
        self._dirty = True

    def _built_ins(self) -> dict[str, _R]:
        """Entries present even without a file (the file's entries override them)."""
        return {}

    @abstractmethod
    def _new(self, name: str) -> _R:
        """A record with every field at its default."""

    def _decode(self, root: Mapping[str, object]) -> None:
        version_data = as_object(root.get("dataVersion", {}), "dataVersion")
        version = _decode_record(DataVersion(0, self._now_ms()), version_data, "dataVersion")
        table = self._built_ins()
        for name, entry in as_object(root.get(self.table_key, {}), self.table_key).items():
            what = f"{self.table_key}[{name!r}]"
            # The map key names the entry, as RocketMQ's lookups do; a stale inner name loses.
            fields = as_object(entry, what)
            table[name] = _decode_record(self._new(name), fields, what, skip=self.name_field)
        self._table, self._data_version = table, version

    def _encode(self) -> dict[str, object]:
        return {
            "dataVersion": _record_to_json(self._data_version),
            self.table_key: {
                name: _record_to_json(self._table[name]) for name in sorted(self._table)
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
            self._bump()
        self.persist()
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


def _record_to_json(record: DataclassInstance) -> dict[str, object]:
    """A record's fields under RocketMQ's camelCase names."""
    return {_camel(field.name): getattr(record, field.name) for field in dataclasses.fields(record)}


def _decode_record(default: _R, entry: Mapping[str, object], what: str, *, skip: str = "") -> _R:
    """``default`` with every field present in ``entry`` (camelCase) read over it."""
    changes: dict[str, object] = {}
    for field in dataclasses.fields(default):
        key = _camel(field.name)
        if field.name != skip and key in entry:
            changes[field.name] = _coerce(entry[key], getattr(default, field.name), f"{what}.{key}")
    return dataclasses.replace(default, **changes)


def _camel(name: str) -> str:
    """``read_queue_nums`` -> ``readQueueNums``."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _coerce(value: object, default: object, what: str) -> object:
    """Check ``value`` against the type of the field's default."""
    if isinstance(default, bool):
        return _as_bool(value, what)
    if isinstance(default, int):
        return as_int(value, what)
    if isinstance(value, str):
        return value
    raise ValueError(f"{what}: expected a string, got {value!r}")


def _as_bool(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{what}: expected true or false, got {value!r}")
