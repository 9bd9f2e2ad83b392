"""fields: one pass reads what a consumer is shown of every kind of record, as the decoder
does."""

from __future__ import annotations

from typing import Any

import pytest

from storage.record.decode import decode_record
from storage.record.fields import (
    VIEW_BODY,
    VIEW_PROPERTIES,
    VIEW_SIZE,
    VIEW_TAGS,
    VIEW_TOPIC,
    NamedView,
    message_view,
)
from tests.storage.record.golden import (
    BODY,
    KEYS,
    UNIQ_KEY,
    every_kind_of_message_record,
    expected_view,
    golden_record,
    in_mmap,
    to_v2,
    uniq_key_records,
    with_properties,
)


def test_the_golden_record_reads_as_its_reference_fields() -> None:
    view = NamedView._make(message_view(golden_record()))
    assert view == (
        "C0A8010200002A9F0000000000001000",  # 192.168.1.2:10911, offset 4096
        "FooBar",
        3,
        42,
        4096,
        158,
        BODY,
        "TAG1",
        [KEYS],
        {},
        1111,
        2222,
        2,
    )


@pytest.mark.parametrize("record", every_kind_of_message_record() + uniq_key_records())
@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(bytes, id="bytes"),
        pytest.param(memoryview, id="memoryview"),
        pytest.param(in_mmap, id="mmap"),
    ],
)
def test_a_view_agrees_with_the_decoder_for_every_kind_of_record(record: bytes, wrap: Any) -> None:
    data = wrap(bytes(13) + record + bytes(7))
    view = message_view(data, 13)
    assert NamedView._make(view) == expected_view(decode_record(data, 13))
    assert type(view) is tuple  # a plain tuple on the hot path
    assert type(view[VIEW_BODY]) is bytes  # a copy, whatever the buffer


def test_a_view_does_not_hold_the_buffer() -> None:
    mapped = in_mmap(bytes(9) + golden_record() + bytes(4))
    view = message_view(mapped, 9)
    mapped.close()  # would fail (BufferError) if the view still pointed into it
    assert NamedView._make(view) == expected_view(decode_record(golden_record()))


def test_the_positions_name_the_fields() -> None:
    fields = NamedView._fields
    positions = (VIEW_TOPIC, VIEW_SIZE, VIEW_BODY, VIEW_TAGS, VIEW_PROPERTIES)
    assert [fields[p] for p in positions] == ["topic", "size", "body", "tags", "properties"]


def test_a_uniq_key_alone_is_the_only_property_shown() -> None:
    view = NamedView._make(message_view(with_properties({"UNIQ_KEY": UNIQ_KEY})))
    assert (view.tags, view.keys, view.properties) == (None, [], {"UNIQ_KEY": UNIQ_KEY})


@pytest.mark.parametrize("layout", [pytest.param(bytes, id="v1"), pytest.param(to_v2, id="v2")])
def test_the_brokers_bookkeeping_is_never_shown(layout: Any) -> None:
    stored = {"UNIQ_KEY": UNIQ_KEY, "TAGS": "t", "region": "eu", "__transactionId__": UNIQ_KEY}
    stored |= {"IDEMPOTENCY_KEY": "re-put 0", "IDEMPOTENCY_FP": "f", "TRAN_DELAY": "3"}
    stored |= {"POP_CK": "T 0 1 ck", "TRAN_TIMER_DELAY_MS": "10", "TRAN_END": "COMMIT"}
    view = NamedView._make(message_view(layout(with_properties(stored))))
    assert view.properties == {"UNIQ_KEY": UNIQ_KEY, "region": "eu", "__transactionId__": UNIQ_KEY}
    assert view.tags == "t"
