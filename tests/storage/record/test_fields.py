"""fields: one pass finds every field of every kind of record, and agrees with the decoder."""

from __future__ import annotations

from typing import Any

import pytest

from storage.record.decode import decode_record
from storage.record.fields import record_fields
from tests.storage.record.golden import (
    BODY,
    KEYS,
    PROPERTIES_BYTES,
    every_kind_of_message_record,
    golden_record,
    in_mmap,
)


def test_the_golden_record_fields_sit_at_their_reference_offsets() -> None:
    record = golden_record()
    fields = record_fields(record)
    assert (fields.size, fields.queue_id, fields.queue_offset, fields.physical_offset) == (
        158,
        3,
        42,
        4096,
    )
    assert (fields.sys_flag, fields.born_timestamp, fields.store_timestamp) == (0, 1111, 2222)
    assert fields.reconsume_times == 2
    assert (fields.store_host_at, fields.store_host_end) == (64, 72)
    assert (fields.body_at, fields.body_end) == (88, 120)
    assert (fields.topic_at, fields.topic_end) == (121, 127)
    assert (fields.properties_at, fields.properties_end) == (129, 158)
    assert record[fields.properties_at : fields.properties_end] == PROPERTIES_BYTES
    assert fields.body() == BODY
    assert fields.topic() == "FooBar"
    assert fields.properties() == {"TAGS": "TAG1", "KEYS": KEYS}
    assert fields.msg_id() == "C0A8010200002A9F0000000000001000"


@pytest.mark.parametrize("record", every_kind_of_message_record())
@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(bytes, id="bytes"),
        pytest.param(memoryview, id="memoryview"),
        pytest.param(in_mmap, id="mmap"),
    ],
)
def test_fields_agree_with_the_decoder_for_every_kind_of_record(record: bytes, wrap: Any) -> None:
    data = wrap(bytes(13) + record + bytes(7))
    decoded = decode_record(data, 13)
    fields = record_fields(data, 13)
    assert fields.properties_end == 13 + fields.size == 13 + len(record)
    assert fields.body() == decoded.body
    assert fields.topic() == decoded.topic
    assert fields.properties() == decoded.properties
    assert fields.msg_id() == decoded.msg_id
    assert (
        fields.size,
        fields.queue_id,
        fields.queue_offset,
        fields.physical_offset,
        fields.sys_flag,
        fields.born_timestamp,
        fields.store_timestamp,
        fields.reconsume_times,
    ) == (
        decoded.size,
        decoded.queue_id,
        decoded.queue_offset,
        decoded.physical_offset,
        decoded.sys_flag,
        decoded.born_timestamp,
        decoded.store_timestamp,
        decoded.reconsume_times,
    )
