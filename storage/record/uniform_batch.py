"""The encoder of a uniform batch: messages that carry nothing but a body and a UNIQ_KEY.

Most batches are bodies alone: no tags, keys, user properties, delay or delivery time, every
message with the same topic, queue, flags and born host and time (one send made them all).
Such a batch needs none of the per-message rules of :class:`~storage.record.encode.
EncodedBatch`; :func:`uniform_batch` checks the shape of the whole batch at once (or takes it
as given: :class:`~storage.record.message.UniformMessages`) and encodes it column by column:
the bodies' CRCs in one comprehension, the records' headers with one precompiled ``struct``
mapped over the columns, the batch in one ``join``. The first message may also carry the
idempotency properties a keyed send stamps on it.

The records are byte for byte those of the general encoder (a property test holds the two
together); anything else — another shape, a refusal of any kind — is left to the general
encoder (``None``), which gives the same answer as before.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import accumulate, count, repeat
from operator import add, attrgetter, itemgetter
from typing import Final

from storage.errors import MessageRejectedError
from storage.record.encode import check_numbers, host_address, properties_field, topic_field
from storage.record.layout import (
    BORNHOST_V6_FLAG,
    CQ_UNIT_STRUCT,
    HOST_V6_BITS,
    MESSAGE_MAGIC_CODE,
    RECORD_HEADERS,
    SHORT_STRUCT,
    STOREHOSTADDRESS_V6_FLAG,
    SYSFLAG_POSITION,
    TRANSACTION_TYPE_MASK,
    body_crcs,
    pack_rows,
)
from storage.record.message import Message, UniformMessages
from storage.record.properties import (
    MAX_PROPERTIES_LENGTH,
    NAME_VALUE_SEPARATOR,
    PROPERTY_IDEMPOTENCY_BATCH,
    PROPERTY_IDEMPOTENCY_FINGERPRINT,
    PROPERTY_IDEMPOTENCY_KEY,
    PROPERTY_SEPARATOR,
    PROPERTY_UNIQ_KEY,
)

_SHAPE: Final = attrgetter(
    "topic",
    "queue_id",
    "flag",
    "sys_flag",
    "born_timestamp",
    "born_host",
    "reconsume_times",
    "prepared_transaction_offset",
)
"""What every message of a uniform batch shares (one C call per message)."""

_FIRST_PROPERTIES: Final = frozenset(
    {
        PROPERTY_UNIQ_KEY,
        PROPERTY_IDEMPOTENCY_KEY,
        PROPERTY_IDEMPOTENCY_FINGERPRINT,
        PROPERTY_IDEMPOTENCY_BATCH,
    }
)
"""The properties the first message may carry: its UNIQ_KEY and a keyed send's stamp."""

_UNIQ_HEAD: Final = (PROPERTY_UNIQ_KEY + NAME_VALUE_SEPARATOR).encode()
_UNIQ_END: Final = PROPERTY_SEPARATOR.encode()
_UNIQ_FRAME: Final = len(_UNIQ_HEAD) + len(_UNIQ_END)
_MAX_UNIQ_KEY: Final = MAX_PROPERTIES_LENGTH - _UNIQ_FRAME
_UNIQ_KEY_OF: Final = itemgetter(PROPERTY_UNIQ_KEY)
_PARTS_PER_RECORD: Final = 5


@lru_cache(maxsize=8)
def _head_struct(middle_size: int) -> struct.Struct:
    """TOTALSIZE .. PHYSICALOFFSET, the batch's constant fields as one string, BODY LENGTH:
    the same bytes as the record header of :mod:`~storage.record.layout` (big-endian, no
    padding)."""
    return struct.Struct(f">iiiiiqq{middle_size}si")


class UniformBatch:
    """A uniform batch, encoded as columns; the same face to the CommitLog as ``EncodedBatch``."""

    __slots__ = (
        "bodies",
        "body_lengths",
        "count",
        "crcs",
        "first_tail",
        "flag",
        "header",
        "idempotency_keys",
        "key_bytes",
        "keys",
        "middle",
        "queue_id",
        "size",
        "sizes",
        "tags_codes",
        "tail_heads",
        "topic",
        "uniq_keys",
    )

    topic: str
    queue_id: int
    count: int
    size: int
    sizes: list[int]
    tags_codes: list[int]
    keys: list[str | None]
    uniq_keys: list[str | None]
    idempotency_keys: list[tuple[int, str]]
    bodies: list[bytes]
    body_lengths: list[int]
    crcs: list[int]
    first_tail: bytes  # TOPIC LENGTH + TOPIC + PROPERTIES LENGTH + PROPERTIES of the first
    tail_heads: list[bytes]  # of each further record: the same up to its UNIQ_KEY
    key_bytes: list[bytes]  # of each further record: its UNIQ_KEY, then PROPERTY_SEPARATOR
    flag: int
    header: struct.Struct
    middle: tuple[int, int, bytes, int, int, int]

    def pack(
        self,
        physical_offset: int,
        queue_offset: int,
        store_timestamp: int,
        store_address: bytes,
        store_port: int,
    ) -> tuple[bytes, bytes, list[int]]:
        """As ``EncodedBatch.pack``: the records from ``physical_offset``, their ConsumeQueue
        units and their physical offsets."""
        sys_flag, born, address, port, reconsume, prepared = self.middle
        middle = self.header.pack(
            0, 0, 0, 0, 0, 0, 0, sys_flag, born, address, port, store_timestamp,
            store_address, store_port, reconsume, prepared, 0,
        )[SYSFLAG_POSITION:-4]  # fmt: skip
        sizes = self.sizes
        offsets = list(accumulate(sizes[:-1], initial=physical_offset))
        heads = map(
            _head_struct(len(middle)).pack,
            sizes,
            repeat(MESSAGE_MAGIC_CODE),
            self.crcs,
            repeat(self.queue_id),
            repeat(self.flag),
            count(queue_offset),
            offsets,
            repeat(middle),
            self.body_lengths,
        )
        data = b"".join(self._parts(heads))
        units = pack_rows(CQ_UNIT_STRUCT, (offsets, sizes, self.tags_codes))
        return data, units, offsets

    def _parts(self, heads: Iterable[bytes]) -> list[bytes]:
        """Each record's pieces in order — header, body, tail head, UNIQ_KEY, separator —
        placed column by column (slice assignment: no call per record)."""
        parts = [_UNIQ_END] * (_PARTS_PER_RECORD * self.count)
        parts[0::_PARTS_PER_RECORD] = heads
        parts[1::_PARTS_PER_RECORD] = self.bodies
        parts[2:5] = self.first_tail, b"", b""
        parts[7::_PARTS_PER_RECORD] = self.tail_heads
        parts[8::_PARTS_PER_RECORD] = self.key_bytes
        return parts


def uniform_batch(
    messages: Sequence[Message], store_v6: bool, max_body_size: int
) -> UniformBatch | None:
    """The batch encoded as a uniform one, or None when it is not uniform (or is refused: the
    general encoder then says why)."""
    if isinstance(messages, UniformMessages):
        return _from_columns(
            messages.first,
            messages.bodies,
            messages.uniq_keys,
            store_v6,
            max_body_size,
            messages.crcs,
        )
    shapes = list(map(_SHAPE, messages))
    if shapes.count(shapes[0]) != len(shapes):
        return None
    properties = [m.properties for m in messages]
    rest = properties[1:]
    if rest and (max(map(len, rest)) != 1 or min(map(len, rest)) != 1):
        return None
    try:
        uniq_keys = [properties[0][PROPERTY_UNIQ_KEY], *map(_UNIQ_KEY_OF, rest)]
    except KeyError:
        return None
    bodies = [m.body for m in messages]
    return _from_columns(messages[0], bodies, uniq_keys, store_v6, max_body_size)


def _from_columns(
    first: Message,
    bodies: list[bytes],
    uniq_keys: list[str],
    store_v6: bool,
    max_body_size: int,
    crcs: list[int] | None = None,
) -> UniformBatch | None:
    """:func:`uniform_batch` of ``first`` followed by messages like it, each with the next of
    ``bodies`` and ``uniq_keys`` as its body and only property, built from the columns
    (``first`` has ``bodies[0]`` and ``uniq_keys[0]``; None as :func:`uniform_batch`).
    ``crcs``: each body's BODYCRC (:func:`~storage.record.layout.body_crc`) if the caller
    made them already (a keyed send's fingerprint is made of them)."""
    if len(uniq_keys) != len(bodies):
        raise ValueError(f"{len(bodies)} bodies and {len(uniq_keys)} UNIQ_KEYs")
    if crcs is not None and len(crcs) != len(bodies):
        raise ValueError(f"{len(bodies)} bodies and {len(crcs)} CRCs")
    topic, queue_id, flag, sys_flag, born_timestamp, born_host, reconsume, prepared = _SHAPE(first)
    if sys_flag & TRANSACTION_TYPE_MASK:
        return None
    first_given = first.properties
    if not _FIRST_PROPERTIES.issuperset(first_given) or PROPERTY_UNIQ_KEY not in first_given:
        return None
    try:
        check_numbers(first)
        key_bytes = _encoded(uniq_keys[1:])
        first_properties = properties_field(first_given)
        address = host_address(born_host[0])
        topic_bytes = topic_field(topic)
    except (KeyError, MessageRejectedError, UnicodeEncodeError, AttributeError, ValueError):
        return None
    body_lengths = list(map(len, bodies))
    if max(body_lengths) > max_body_size or (
        key_bytes and max(map(len, key_bytes)) > _MAX_UNIQ_KEY
    ):
        return None
    sys_flag = (sys_flag & ~HOST_V6_BITS) | (STOREHOSTADDRESS_V6_FLAG if store_v6 else 0)
    if len(address) == 16:
        sys_flag |= BORNHOST_V6_FLAG
    header = RECORD_HEADERS[sys_flag & HOST_V6_BITS]
    first_tail = topic_bytes + SHORT_STRUCT.pack(len(first_properties)) + first_properties
    tail_heads = _tail_heads(topic_bytes, key_bytes)
    fixed = header.size
    sizes = _sizes(
        fixed + len(first_tail), fixed + len(_UNIQ_END), body_lengths, tail_heads, key_bytes
    )
    batch = UniformBatch()
    batch.topic = topic
    batch.queue_id = queue_id
    batch.count = len(bodies)
    batch.size = sum(sizes)
    batch.sizes = sizes
    batch.tags_codes = [0] * len(bodies)
    batch.keys = [None] * len(bodies)
    batch.uniq_keys = list(uniq_keys)
    key = first_given.get(PROPERTY_IDEMPOTENCY_KEY)
    batch.idempotency_keys = [] if key is None else [(0, key)]
    batch.bodies = bodies
    batch.body_lengths = body_lengths
    batch.crcs = body_crcs(bodies) if crcs is None else crcs
    batch.first_tail = first_tail
    batch.tail_heads = tail_heads
    batch.key_bytes = key_bytes
    batch.flag = flag
    batch.header = header
    batch.middle = (sys_flag, born_timestamp, address, born_host[1], reconsume, prepared)
    return batch


def _encoded(keys: list[str]) -> list[bytes]:
    """Each key UTF-8 encoded: one ``encode`` of the keys joined and one ``split`` when no key
    holds the separator (generated keys are hex), else one by one."""
    if not keys:
        return []
    try:
        joined = ",".join(keys)
    except TypeError:  # not all str: refused one by one, as before
        return [key.encode() for key in keys]
    if joined.count(",") == len(keys) - 1:
        return joined.encode().split(b",")
    return [key.encode() for key in keys]


def _tail_heads(topic_bytes: bytes, keys: list[bytes]) -> list[bytes]:
    """TOPIC LENGTH + TOPIC + PROPERTIES LENGTH + ``UNIQ_KEY\x01`` before each key (then the
    key and ``\x02`` end the record); keys of one length (generated ones) share one."""
    if not keys:
        return []
    if min(map(len, keys)) == max(map(len, keys)):
        return [topic_bytes + SHORT_STRUCT.pack(len(keys[0]) + _UNIQ_FRAME) + _UNIQ_HEAD] * len(
            keys
        )
    return [topic_bytes + SHORT_STRUCT.pack(len(key) + _UNIQ_FRAME) + _UNIQ_HEAD for key in keys]


def _sizes(
    first_fixed: int,
    fixed: int,
    body_lengths: list[int],
    tail_heads: list[bytes],
    keys: list[bytes],
) -> list[int]:
    """Each record's TOTALSIZE: its header and body, then the first's tail (``first_fixed``
    holds both fixed parts) or a further record's tail head, key and separator (``fixed``)."""
    rest = map(add, body_lengths[1:], map(add, map(len, tail_heads), map(len, keys)))
    return [first_fixed + body_lengths[0], *map(add, rest, repeat(fixed))]
