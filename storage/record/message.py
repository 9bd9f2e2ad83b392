"""The message values every layer passes around: what a producer gives the store
(:class:`Message`; a batch alike but for its bodies: :class:`UniformMessages`), what the
CommitLog hands back decoded (:class:`StoredMessage`) or as a consumer is shown it
(:class:`MessageView`), and what a put and a get answer (:class:`Appended` of
:class:`PutResult`, :class:`PutStatus`, :class:`GetMessageStatus`).

This is the one module of :mod:`storage` the HTTP layer may import directly (an
import-linter contract says so): values only, nothing that touches a file.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import overload

from storage.record.fields import MessageView as MessageView  # what app renders a pull from
from storage.record.msg_id import msg_id_prefix
from storage.record.properties import PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY, split_keys


@dataclass(slots=True)
class Message:
    """A message to append, as the producer gives it."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    store_timestamp: int = 0
    """0: the time of the append. A committed transactional message keeps its half
    message's (RocketMQ's ``endMessageTransaction``); batches always take the append time."""


@dataclass(slots=True)
class StoredMessage:
    """A record decoded from the CommitLog; treat it as read-only.

    Not ``frozen``: a frozen dataclass sets each of these 16 fields through
    ``object.__setattr__``, which on the pull path costs more than the rest of decoding a
    record.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    body_crc: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int

    @property
    def msg_id(self) -> str:
        """The offsetMsgId: the store's :func:`msg_id_prefix` + the offset in 16 hex digits."""
        host, port = self.store_host
        return msg_id_prefix(host, port) + f"{self.physical_offset:016X}"

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return split_keys(self.properties.get(PROPERTY_KEYS))

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # sync replication: a slave did not ack in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # sync replication: no slave in sync


@dataclass(slots=True)  # not frozen: cheaper to build, once per put (see StoredMessage)
class PutResult:
    """One stored message: its id and where it went."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    store_timestamp: int
    status: PutStatus = PutStatus.PUT_OK

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.size


@dataclass(slots=True, eq=False)
class Appended(Sequence[PutResult]):
    """Where one put went — one message, or one atomic batch of one topic and queue — as
    columns: record ``i`` has msg id ``msg_id_prefix + f"{offsets[i]:016X}"``, queue offset
    ``first_queue_offset + i`` and ``sizes[i]`` bytes; every record has the put's store time
    and status. A record's :class:`PutResult` is made when it is asked for."""

    msg_id_prefix: str  # the store's: host + port, hex (see msg_id)
    topic: str
    queue_id: int
    first_queue_offset: int
    offsets: list[int]  # physical offset of each record
    sizes: list[int]
    store_timestamp: int
    status: PutStatus = PutStatus.PUT_OK

    @property
    def end_offset(self) -> int:
        """Where the put ends in the CommitLog."""
        return self.offsets[-1] + self.sizes[-1] if self.offsets else 0

    def msg_ids(self) -> list[str]:
        return list(map((self.msg_id_prefix + "{:016X}").format, self.offsets))

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[PutResult]:
        return iter(self.results())

    @overload
    def __getitem__(self, index: int) -> PutResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[PutResult]: ...
    def __getitem__(self, index: int | slice) -> PutResult | list[PutResult]:
        if isinstance(index, slice):
            return self.results()[index]
        offset = self.offsets[index]
        number = range(len(self.offsets))[index]
        return PutResult(
            self.msg_id_prefix + f"{offset:016X}",
            self.topic,
            self.queue_id,
            self.first_queue_offset + number,
            offset,
            self.sizes[number],
            self.store_timestamp,
            self.status,
        )

    def results(self) -> list[PutResult]:
        """Every record's put result."""
        return list(
            map(
                PutResult,
                self.msg_ids(),
                itertools.repeat(self.topic),
                itertools.repeat(self.queue_id),
                itertools.count(self.first_queue_offset),
                self.offsets,
                self.sizes,
                itertools.repeat(self.store_timestamp),
                itertools.repeat(self.status),
            )
        )


class UniformMessages(Sequence[Message]):
    """The messages of one send that are alike but for their bodies and UNIQ_KEYs: ``first``
    (which may carry more properties: a keyed send's marks), then one like it for each further
    body, its UNIQ_KEY its only property — the common batch. The store encodes such a batch
    column by column (:mod:`storage.record.uniform_batch`); to anyone else it is the messages
    it stands for. ``crcs``: each body's BODYCRC, if made already."""

    __slots__ = ("bodies", "crcs", "first", "uniq_keys")

    def __init__(
        self,
        first: Message,
        bodies: list[bytes],
        uniq_keys: list[str],
        crcs: list[int] | None = None,
    ) -> None:
        if len(uniq_keys) != len(bodies) or (crcs is not None and len(crcs) != len(bodies)):
            raise ValueError("a body, a UNIQ_KEY and a CRC (if any) per message")
        self.first = first
        self.bodies = bodies
        self.uniq_keys = uniq_keys
        self.crcs = crcs

    def __len__(self) -> int:
        return len(self.bodies)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self.bodies))[index]]
        number = range(len(self.bodies))[index]
        first = self.first
        if number == 0:
            return first
        return Message(
            first.topic,
            self.bodies[number],
            first.queue_id,
            {PROPERTY_UNIQ_KEY: self.uniq_keys[number]},
            first.flag,
            first.sys_flag,
            first.born_timestamp,
            first.born_host,
            first.reconsume_times,
            first.prepared_transaction_offset,
        )


class GetMessageStatus(Enum):
    """RocketMQ's answer to a read by queue offset (reference §10.3)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
