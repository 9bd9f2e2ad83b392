"""The answer to a send rendered from its columns (``app.schemas.sent_columns``): each helper
gives what the per-value formatting it replaces gives, and ``sent_json`` gives byte for byte
the JSON the receipts render to, for any topic, UNIQ_KEY, offset, time and status — labelled for
a proxy too."""

from __future__ import annotations

import itertools

import orjson
from hypothesis import given
from hypothesis import strategies as st

from app.labels import on_send
from app.schemas import send_response_out, sent_json
from app.schemas.sent_columns import decimals, offset_hex
from services import Sent
from services.cluster import ClusterLabels
from storage import Appended, PutStatus

HEX = st.text("0123456789ABCDEF", min_size=32, max_size=32)
KEYS = HEX | st.text(max_size=6)
INT64 = st.integers(0, 2**63 - 1)
QUEUE_IDS = st.integers(0, 2**31 - 1)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_offset_hex_is_each_offset_in_16_uppercase_hex_digits(offsets: list[int]) -> None:
    assert offset_hex(offsets) == [f"{offset:016X}" for offset in offsets]


@given(st.lists(st.integers(-(2**63), 2**64 - 1), max_size=40))
def test_decimals_are_each_number_as_str_renders_it(numbers: list[int]) -> None:
    assert decimals(numbers) == list(map(str, numbers))


@st.composite
def sends(draw: st.DrawFn) -> Sent:
    count = draw(st.integers(1, 6))
    keys = draw(st.lists(HEX, min_size=count, max_size=count) | st.lists(KEYS, min_size=count))
    offsets = draw(st.lists(INT64, min_size=len(keys), max_size=len(keys)))
    put = Appended(
        draw(st.sampled_from(["7F00000100002A9F", "00000000000000000000000000000001FFFF"])),
        "",
        draw(st.integers(0, 2**31 - 1)),
        draw(INT64),
        offsets,
        [1] * len(offsets),
        draw(INT64),
        draw(st.sampled_from(list(PutStatus))),
    )
    topic = draw(st.sampled_from(["T", "Topic_a-1"]) | st.text(max_size=8))
    return Sent(topic, appended=put, uniq_keys=keys)


@given(sends())
def test_the_columns_render_the_json_of_the_receipts(sent: Sent) -> None:
    expected = orjson.dumps(send_response_out(sent))
    found = sent_json(sent)
    joined = "".join(sent.uniq_keys or ())
    if joined.isascii() and orjson.dumps(joined) == b'"%s"' % joined.encode():
        assert found == expected
    else:
        assert found is None  # the route renders the receipts instead


@given(sends(), st.sampled_from(["g1", "grp-\u00e9"]), st.dictionaries(QUEUE_IDS, QUEUE_IDS))
def test_labelled_receipts_render_what_the_labels_give(
    sent: Sent, group: str, queue_ids: dict[int, int]
) -> None:
    labels = ClusterLabels(group, sent.topic, queue_ids)
    expected = orjson.dumps(on_send(send_response_out(sent), labels))
    found = sent_json(sent, labels)
    joined = "".join(sent.uniq_keys or ())
    if joined.isascii() and orjson.dumps(joined) == b'"%s"' % joined.encode():
        assert found == expected
    else:
        assert found is None


def test_listed_receipts_are_not_rendered_from_columns() -> None:
    assert sent_json(Sent("T", listed=[])) is None


def _template_json(sent: Sent) -> bytes:
    """The rendering the columns replaced: one template formatted per message."""
    put, keys = sent.appended, sent.uniq_keys
    assert put is not None and keys is not None
    message = (
        '{{"msg_id":"' + put.msg_id_prefix + '{1:016X}","uniq_key":"{0}",'
        f'"queue_id":{put.queue_id},"queue_offset":{{2}},"commit_log_offset":{{1}},'
        f'"store_timestamp":{put.store_timestamp},"status":"{put.status.value}",'
        '"delay_level":0,"deliver_at":null,"timer_handle":null}}'
    )
    messages = ",".join(
        map(message.format, keys, put.offsets, itertools.count(put.first_queue_offset))
    )
    return b'{"topic":%s,"messages":[%s]}' % (orjson.dumps(sent.topic), messages.encode())


@given(st.integers(1, 300), st.data())
def test_the_columns_render_what_the_template_rendered(count: int, data: st.DataObject) -> None:
    keys = data.draw(st.lists(HEX, min_size=count, max_size=count))
    offsets = data.draw(st.lists(INT64, min_size=count, max_size=count))
    put = Appended(
        "7F00000100002A9F", "", data.draw(st.integers(0, 2**31 - 1)), data.draw(INT64),
        offsets, [1] * count, data.draw(INT64),
    )  # fmt: skip
    sent = Sent(data.draw(st.text(max_size=8)), appended=put, uniq_keys=keys)
    assert sent_json(sent) == _template_json(sent)
