"""A batch of bodies alone is answered from columns (``sent_bodies_json``): byte for byte
the JSON the receipts of the general way render to, for any topic, UNIQ_KEY, offset, time
and status; and over HTTP such a batch answers and stores as every batch does."""

from __future__ import annotations

import itertools

import httpx
import orjson
from hypothesis import given
from hypothesis import strategies as st

from app.schemas import send_response_out, sent_bodies_json
from services import SentBodies
from storage import BatchPut, PutStatus

HEX = st.text("0123456789ABCDEF", min_size=32, max_size=32)
KEYS = HEX | st.text(max_size=6)
INT64 = st.integers(0, 2**63 - 1)


@st.composite
def sent_batches(draw: st.DrawFn) -> SentBodies:
    count = draw(st.integers(1, 6))
    keys = draw(st.lists(HEX, min_size=count, max_size=count) | st.lists(KEYS, min_size=count))
    offsets = draw(st.lists(INT64, min_size=len(keys), max_size=len(keys)))
    put = BatchPut(
        draw(st.sampled_from(["7F00000100002A9F", "00000000000000000000000000000001FFFF"])),
        "",
        draw(st.integers(0, 2**31 - 1)),
        draw(INT64),
        offsets,
        draw(INT64),
        draw(INT64),
    )
    topic = draw(st.sampled_from(["T", "Topic_a-1"]) | st.text(max_size=8))
    status = draw(st.sampled_from([s.value for s in PutStatus]))
    return SentBodies(topic, put, keys, status)


@given(sent_batches())
def test_the_columns_render_the_json_of_the_receipts(sent: SentBodies) -> None:
    expected = orjson.dumps(send_response_out(sent.topic, sent.receipts()))
    found = sent_bodies_json(sent)
    joined = "".join(sent.uniq_keys)
    if joined.isascii() and orjson.dumps(joined) == b'"%s"' % joined.encode():
        assert found == expected
    else:
        assert found is None  # the route renders the receipts instead


def test_a_batch_of_generated_keys_renders_from_the_template() -> None:
    put = BatchPut("7F00000100002A9F", "T", 2, 5, [100, 300], 1_700_000_000_000, 500)
    sent = SentBodies('q"t', put, ["0A" * 16, "0B" * 16], "PUT_OK")
    assert orjson.loads(sent_bodies_json(sent) or b"") == {
        "topic": 'q"t',
        "messages": [
            {
                "msg_id": f"7F00000100002A9F{offset:016X}",
                "uniq_key": key,
                "queue_id": 2,
                "queue_offset": 5 + number,
                "commit_log_offset": offset,
                "store_timestamp": 1_700_000_000_000,
                "status": "PUT_OK",
                "delay_level": 0,
                "deliver_at": None,
                "timer_handle": None,
            }
            for number, (offset, key) in enumerate([(100, "0A" * 16), (300, "0B" * 16)])
        ],
    }


def test_over_http_a_batch_of_bodies_answers_as_the_general_way(
    client: httpx.Client, topic: str
) -> None:
    batch = {"messages": [{"body": f"m{i}"} for i in range(5)], "queue_id": 1}
    columns = client.post(f"/v1/topics/{topic}/messages", json=batch)
    # An idempotency key takes the general way (receipts rendered as dicts).
    general = client.post(
        f"/v1/topics/{topic}/messages", json=batch, headers={"Idempotency-Key": "k-1"}
    )
    assert columns.status_code == general.status_code == 201
    assert columns.headers["content-type"] == general.headers["content-type"]
    assert columns.headers["content-length"] == str(len(columns.content))
    first, second = columns.json(), general.json()
    assert [m["queue_offset"] for m in first["messages"]] == list(range(5))
    assert [m["queue_offset"] for m in second["messages"]] == list(range(5, 10))
    for one, other in zip(first["messages"], second["messages"], strict=True):
        assert one.keys() == other.keys()
        assert {k: v for k, v in one.items() if k in ("queue_id", "status", "delay_level")} == {
            k: v for k, v in other.items() if k in ("queue_id", "status", "delay_level")
        }
    pulled = client.get(
        f"/v1/topics/{topic}/queues/1/messages", params={"offset": 0, "max_messages": 10}
    ).json()
    assert [m["body"] for m in pulled["messages"]] == [f"m{i}" for i in range(5)] * 2
    assert [m["msg_id"] for m in pulled["messages"][:5]] == [m["msg_id"] for m in first["messages"]]


def _template_json(sent: SentBodies) -> bytes:
    """The rendering the columns replaced: one template formatted per message."""
    put = sent.put
    message = (
        '{{"msg_id":"' + put.msg_id_prefix + '{1:016X}","uniq_key":"{0}",'
        f'"queue_id":{put.queue_id},"queue_offset":{{2}},"commit_log_offset":{{1}},'
        f'"store_timestamp":{put.store_timestamp},"status":{orjson.dumps(sent.status).decode()},'
        '"delay_level":0,"deliver_at":null,"timer_handle":null}}'
    )
    messages = ",".join(
        map(message.format, sent.uniq_keys, put.offsets, itertools.count(put.first_queue_offset))
    )
    return b'{"topic":%s,"messages":[%s]}' % (orjson.dumps(sent.topic), messages.encode())


@given(st.integers(0, 300), st.data())
def test_the_columns_render_what_the_template_rendered(count: int, data: st.DataObject) -> None:
    keys = data.draw(st.lists(HEX, min_size=count, max_size=count))
    offsets = data.draw(st.lists(INT64, min_size=count, max_size=count))
    put = BatchPut(
        "7F00000100002A9F", "", data.draw(st.integers(0, 2**31 - 1)), data.draw(INT64),
        offsets, data.draw(INT64), data.draw(INT64),
    )  # fmt: skip
    sent = SentBodies(data.draw(st.text(max_size=8)), put, keys, "PUT_OK")
    assert sent_bodies_json(sent) == _template_json(sent)
