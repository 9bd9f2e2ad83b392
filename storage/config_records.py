"""The records of the broker's config files and their JSON form (RocketMQ's camelCase names).

:mod:`storage.config_managers` keeps them in tables and files; :func:`record_to_json` and
:func:`decode_record` are the one mapping between a record and its JSON object.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, NamedTuple, TypeVar

from storage.delay_levels import SCHEDULE_TOPIC as DELAY_SCHEDULE_TOPIC
from storage.json_file import TOPIC_GROUP_SEPARATOR, as_int

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_R = TypeVar("_R", bound="DataclassInstance")

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
    trace: bool | None = None  # our extension: message trace on/off; None: the broker default

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
    # Our extension: the group's SQL92 filter per topic (RocketMQ keeps a group's SQL92
    # subscriptions in consumerFilter.json), for pulls and receives that name none.
    filters: Mapping[str, str] = dataclasses.field(default_factory=dict)

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


# ---------------------------------------------------------------- JSON


def record_to_json(record: DataclassInstance) -> dict[str, object]:
    """A record's fields under RocketMQ's camelCase names; an optional one left unset (None)
    is left out."""
    return {
        camel(field.name): value
        for field in dataclasses.fields(record)
        if (value := getattr(record, field.name)) is not None
    }


def decode_record(default: _R, entry: Mapping[str, object], what: str, *, skip: str = "") -> _R:
    """``default`` with every field present in ``entry`` (camelCase) read over it."""
    changes: dict[str, object] = {}
    for field in dataclasses.fields(default):
        key = camel(field.name)
        if field.name != skip and key in entry:
            changes[field.name] = _coerce(entry[key], getattr(default, field.name), f"{what}.{key}")
    return dataclasses.replace(default, **changes)


def camel(name: str) -> str:
    """``read_queue_nums`` -> ``readQueueNums``."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _coerce(value: object, default: object, what: str) -> object:
    """Check ``value`` against the type of the field's default (None: an optional bool)."""
    if default is None:
        return None if value is None else _as_bool(value, what)
    if isinstance(default, bool):
        return _as_bool(value, what)
    if isinstance(default, int):
        return as_int(value, what)
    if isinstance(default, Mapping):
        return _as_text_map(value, what)
    if isinstance(value, str):
        return value
    raise ValueError(f"{what}: expected a string, got {value!r}")


def _as_text_map(value: object, what: str) -> dict[str, str]:
    if isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return dict(value)
    raise ValueError(f"{what}: expected an object of strings, got {value!r}")


def _as_bool(value: object, what: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"{what}: expected true or false, got {value!r}")
