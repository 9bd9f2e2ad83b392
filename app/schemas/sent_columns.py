"""The answer to a send, rendered from its columns (:class:`~services.Sent` of messages stored
where they were sent: the usual send).

A batch of 100 is answered with 100 receipts; formatting each from a template parses the
template and formats three integers once per message, the largest part of what the batch's
answer cost. Here every column is rendered by one C call for the whole batch — the msg ids'
offsets by one ``hex`` over their packed bytes, the offsets and queue offsets by one
``orjson.dumps`` — and the columns are interleaved with the constant JSON between them by
slice assignment into one list, joined once. The bytes are those of
``orjson.dumps(send_response_out(sent))`` — with a proxy's labels, those of
``orjson.dumps(on_send(send_response_out(sent), labels))`` (:mod:`app.labels`); property tests
hold them together.
"""

from __future__ import annotations

import struct
from typing import Final

import orjson

from services import Sent
from services.cluster import ClusterLabels

_FIELDS_PER_MESSAGE: Final = 8
"""msg id's offset, ``","uniq_key":"``, UNIQ_KEY, ``..."queue_offset":``, queue offset,
``,"commit_log_offset":``, CommitLog offset, the rest of the message and the next's start."""


def sent_json(sent: Sent, labels: ClusterLabels | None = None) -> bytes | None:
    """``orjson.dumps(send_response_out(sent))`` (labelled by ``labels``, as
    :func:`app.labels.on_send` labels it), built from the columns of a send whose receipts
    are columns; None for any other, or when a UNIQ_KEY is not ASCII or needs escaping in
    JSON (then the receipts must be rendered)."""
    put, uniq_keys = sent.appended, sent.uniq_keys
    if put is None or uniq_keys is None:
        return None
    joined = "".join(uniq_keys)
    if not joined.isascii() or len(orjson.dumps(joined)) != len(joined) + 2:
        return None
    offsets = put.offsets
    count = len(offsets)
    queue_id = put.queue_id
    head = b'{"topic":%s,"messages":[' % orjson.dumps(sent.topic)
    if labels is not None:
        queue_id = labels.queue_id(queue_id)  # the send's topic is the labels' topic
        head = b'{"broker_group":%s,%s' % (orjson.dumps(labels.group), head[1:])
    if not count:
        return head + b"]}"
    start = '{"msg_id":"' + put.msg_id_prefix
    end = (
        f',"store_timestamp":{put.store_timestamp},"status":{orjson.dumps(put.status.value).decode()},'
        '"delay_level":0,"deliver_at":null,"timer_handle":null}'
    )
    parts = [
        "", '","uniq_key":"', "", f'","queue_id":{queue_id},"queue_offset":', "",
        ',"commit_log_offset":', "", end + "," + start,
    ] * count  # fmt: skip
    parts[0::_FIELDS_PER_MESSAGE] = offset_hex(offsets)
    parts[2::_FIELDS_PER_MESSAGE] = uniq_keys
    first = put.first_queue_offset
    parts[4::_FIELDS_PER_MESSAGE] = decimals(list(range(first, first + count)))
    parts[6::_FIELDS_PER_MESSAGE] = decimals(offsets)
    parts[-1] = end
    return head + (start + "".join(parts)).encode() + b"]}"


def offset_hex(offsets: list[int]) -> list[str]:
    """Each offset as 16 uppercase hex digits (``f"{offset:016X}"``, what a msg id ends
    with), from one ``hex`` over the offsets packed big-endian."""
    if not offsets:
        return []
    packed = struct.pack(f">{len(offsets)}Q", *offsets)
    return packed.hex(",", 8).upper().split(",")


def decimals(numbers: list[int]) -> list[str]:
    """Each integer in decimal (``str(number)``), from one ``orjson.dumps`` of the list."""
    if not numbers:
        return []
    return orjson.dumps(numbers)[1:-1].decode().split(",")
