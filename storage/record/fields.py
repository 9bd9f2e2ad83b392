"""What a reader shows of one record, read in a single pass over its bytes.

:func:`message_view` reads the fixed-width numbers with one ``struct`` call, follows the
BODY and TOPIC length fields (PROPERTIES end the record) and takes what a consumer is shown of
the message -- its msg id, topic, queue position, body, TAGS, KEYS, the other properties but
the broker's bookkeeping (:func:`~storage.record.properties.shown_properties`) and three
numbers -- as a :data:`MessageView`. The properties of most records are the UNIQ_KEY a
send sets, alone: one regular-expression match finds that key without decoding them. Nothing
else is decoded (no hosts, no :class:`~storage.record.message.StoredMessage`), and the view
holds copies, never the buffer: a mapped file that retention unmaps afterwards is not
referred to. The pull path reads records this way, straight from the mapped CommitLog file,
and renders its answer from the views.

A view is a plain tuple: a named one (:class:`NamedView`) costs a pull noticeably more per
message to make and to free (``bench/pull_instructions.py``). Readers pick single fields out by
the ``VIEW_*`` positions; :class:`NamedView` names them all, for callers other than pulls.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Final, NamedTuple

from storage.record.layout import (
    FIXED_FIELDS_V4,
    HOST_V6_BITS,
    INT_STRUCT,
    MESSAGE_MAGIC_CODE,
    RECORD_HEADER_V4,
    SHORT_STRUCT,
    SYSFLAG_POSITION,
    Buffer,
    record_header_struct,
    store_host_position,
    topic_length_width,
)
from storage.record.msg_id import (
    STORE_HOST_NUMBER_PREFIXES,
    store_host_number_prefix,
    store_host_prefix,
)
from storage.record.properties import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    shown_properties,
    split_keys,
)

_unpack_fixed_v4 = FIXED_FIELDS_V4.unpack_from
_unpack_short = SHORT_STRUCT.unpack_from
_HEADER_V4_SIZE = RECORD_HEADER_V4.size
_UNIQ_KEY_NAME: Final = f"{PROPERTY_UNIQ_KEY}{NAME_VALUE_SEPARATOR}".encode()
_UNIQ_KEY_DIGITS: Final = 32  # the UNIQ_KEY a send sets: 32 hex digits
_UNIQ_KEY_PROPERTIES: Final = (
    re.escape(SHORT_STRUCT.pack(len(_UNIQ_KEY_NAME) + _UNIQ_KEY_DIGITS + 1) + _UNIQ_KEY_NAME)
    + b"([0-9A-Za-z]{%d})" % _UNIQ_KEY_DIGITS
    + re.escape(PROPERTY_SEPARATOR.encode())
)
_UNIQ_KEY_ONLY: Final = re.compile(_UNIQ_KEY_PROPERTIES).fullmatch
"""Matches a PROPERTIES field (length, then ``UNIQ_KEY\x01<key>\x02``) holding nothing but
the UNIQ_KEY a send sets; group 1 is the key. Decoding such a field gives that key alone."""


class NamedView(NamedTuple):
    """One message as a consumer is shown it: the fields of a pull answer's message, in the
    order of a :data:`MessageView` (``NamedView._make(view)`` names one)."""

    msg_id: str  # the offsetMsgId (store host + physical offset)
    topic: str  # the topic of the record (a retried message: its retry topic)
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int  # TOTALSIZE
    body: bytes
    tags: str | None  # TAGS
    keys: list[str]  # KEYS, split
    properties: dict[str, str]  # every property but TAGS, KEYS and the broker's bookkeeping
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int


MessageView = tuple[
    str, str, int, int, int, int, bytes, str | None, list[str], dict[str, str], int, int, int
]
"""The fields of :class:`NamedView`, in its order, as a plain tuple."""

# Positions of NamedView's fields in a MessageView, for readers that pick one out.
VIEW_TOPIC: Final = 1
VIEW_SIZE: Final = 5
VIEW_BODY: Final = 6
VIEW_TAGS: Final = 7
VIEW_PROPERTIES: Final = 9


QueueTopic = tuple[bytes, str, Callable[[Buffer, int, int], "re.Match[bytes] | None"]]
"""A queue's topic as records store it (UTF-8) and as text: the view of a record of that
topic shows this very text, not a copy decoded per record (every record of a queue but the
rare retried or moved one has its queue's topic). Third, the match of a v1 record's TOPIC and
PROPERTIES (from the topic length to the end of the record) when the topic is this one and
the properties the UNIQ_KEY alone (:data:`_UNIQ_KEY_ONLY`): one regular-expression call
instead of a slice and compare of the topic and that match. Made by :func:`queue_topic`."""


def queue_topic(text: str) -> QueueTopic:
    """The :data:`QueueTopic` of a queue's topic ``text``."""
    name = text.encode()
    return name, text, _topic_and_uniq_key(name)


@lru_cache(maxsize=1024)
def _topic_and_uniq_key(name: bytes) -> Callable[[Buffer, int, int], re.Match[bytes] | None]:
    """The third part of a :data:`QueueTopic` of topic ``name`` (remembered: one per
    queue)."""
    if len(name) > _MAX_V1_TOPIC:  # no v1 record holds it: never matches
        return _NEVER
    return re.compile(re.escape(bytes([len(name)]) + name) + _UNIQ_KEY_PROPERTIES).fullmatch


_MAX_V1_TOPIC: Final = 255  # a v1 record's topic length is one byte
_NEVER: Final = re.compile(b"(?!)").fullmatch
_NO_TOPIC: Final[QueueTopic] = queue_topic("")


def message_view(data: Buffer, position: int = 0, topic: QueueTopic = _NO_TOPIC) -> MessageView:
    """The view of the complete, valid record (v1 or v2) at ``position`` of ``data``; its
    topic's text ``topic``'s when the record's topic is ``topic``'s."""
    (
        size,
        magic,
        queue_id,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        store_timestamp,
        store_host,
        reconsume_times,
        body_length,
    ) = _unpack_fixed_v4(data, position)
    if sys_flag & HOST_V6_BITS or magic != MESSAGE_MAGIC_CODE:
        return _other_layout_view(data, position, topic)
    body_at = position + _HEADER_V4_SIZE
    body_end = body_at + body_length
    topic_end = body_end + 1 + data[body_end]
    # Slices of bytes and of a mapping are bytes already; of a memoryview, views to copy.
    body = data[body_at:body_end]
    if type(body) is not bytes:
        body = bytes(body)
    prefix = STORE_HOST_NUMBER_PREFIXES.get(store_host) or store_host_number_prefix(store_host)
    # PROPERTIES end the record (TOTALSIZE counts every field up to them)
    only_key = topic[2](data, body_end, position + size)  # the queue's topic and a UNIQ_KEY
    if only_key is not None:
        topic_text = topic[1]
    else:
        name = data[body_end + 1 : topic_end]
        topic_text = topic[1] if name == topic[0] else str(name, "utf-8")
        only_key = _UNIQ_KEY_ONLY(data, topic_end, position + size)
    if only_key is not None:  # what decoding finds there: no TAGS, no KEYS
        tags = None
        keys: list[str] = []
        properties = {PROPERTY_UNIQ_KEY: only_key[1].decode("ascii")}  # cheaper than str()
    else:
        properties = shown_properties(decode_properties(data[topic_end + 2 : position + size]))
        tags = properties.pop(PROPERTY_TAGS, None)
        keys = split_keys(properties.pop(PROPERTY_KEYS, None))
    return (  # the field order of NamedView
        "%s%016X" % (prefix, physical_offset),  # noqa: UP031 -- cheaper than an f-string here
        topic_text,
        queue_id,
        queue_offset,
        physical_offset,
        size,
        body,
        tags,
        keys,
        properties,
        born_timestamp,
        store_timestamp,
        reconsume_times,
    )


def _other_layout_view(data: Buffer, position: int, topic: QueueTopic) -> MessageView:
    """The view of a record with an IPv6 host or in format v2 (a two-byte topic length)."""
    sys_flag = INT_STRUCT.unpack_from(data, position + SYSFLAG_POSITION)[0]
    header = record_header_struct(sys_flag)
    fields = header.unpack_from(data, position)
    body_at = position + header.size
    body_end = body_at + fields[16]  # BODY LENGTH
    width = topic_length_width(fields[1])  # MAGICCODE
    topic_length = _unpack_short(data, body_end)[0] if width == 2 else data[body_end]
    topic_end = body_end + width + topic_length
    properties_end = topic_end + 2 + _unpack_short(data, topic_end)[0]
    host_at = position + store_host_position(sys_flag)
    host = bytes(data[host_at : host_at + len(fields[12]) + INT_STRUCT.size])  # address + port
    properties = shown_properties(decode_properties(data[topic_end + 2 : properties_end]))
    physical_offset = fields[6]  # PHYSICALOFFSET
    name = data[body_end + width : topic_end]
    return (
        f"{store_host_prefix(host)}{physical_offset:016X}",
        topic[1] if name == topic[0] else str(name, "utf-8"),
        fields[3],  # QUEUEID
        fields[5],  # QUEUEOFFSET
        physical_offset,
        fields[0],  # TOTALSIZE
        bytes(data[body_at:body_end]),
        properties.pop(PROPERTY_TAGS, None),
        split_keys(properties.pop(PROPERTY_KEYS, None)),
        properties,
        fields[8],  # BORNTIMESTAMP
        fields[11],  # STORETIMESTAMP
        fields[14],  # RECONSUMETIMES
    )
