"""The byte-level relabelling of fanned-out answers against the decoded way, over answers
Hypothesis makes in the broker's layout (the member order its renderers give, orjson's
encoding): bodies, tags, keys, property names and values, and receipt handles that hold the
very patterns the byte level looks for (message boundaries, ``"receipt_handle":"``,
``"queue_id":``), retry messages, one message or many, in groups whose queue ids change and
groups whose ids do not. The real broker's answers are in tests/app/test_proxy_relabel.py."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.proxy.forward import BrokerAnswer
from app.proxy.relabel import (
    Relabelled,
    merged_pull,
    merged_receive,
    relabel_pull,
    relabel_receive,
)
from tests.app.test_proxy_relabel import ROUTE, TOPIC, pull_before, receive_before

GROUP = "Layouts"
OTHER = 'Another \u00e9 "group"'
PATTERNS = [
    '},{"msg_id":"',
    '"receipt_handle":"',
    '"queue_id":',
    f'"topic":"{TOPIC}","queue_id":1,',
    '"queue_topic":',
    '],"queues":[',
    '","delivery_attempt":1,"invisible_until":2}',
    "\\",
    '"',
]
NAMES = [
    "receipt_handle",
    "queue_id",
    "topic",
    "msg_id",
    "broker_group",
    "delivery_attempt",
    "invisible_until",
    "queue_topic",
]

tricky_text = st.lists(st.sampled_from(PATTERNS) | st.text(max_size=12), max_size=5).map("".join)
property_names = st.sampled_from(NAMES) | st.text(min_size=1, max_size=8)


@st.composite
def messages(draw: st.DrawFn, *, pop: bool) -> dict[str, Any]:
    """One message as the broker renders it (``message_out``, then a retry's ``queue_topic``
    and a POP message's members)."""
    retry = draw(st.booleans()) and draw(st.booleans())
    message: dict[str, Any] = {
        "msg_id": draw(st.text("0123456789ABCDEF", min_size=32, max_size=32)),
        "topic": TOPIC,
        "queue_id": 0 if retry else draw(st.integers(0, 3)),
        "queue_offset": draw(st.integers(0, 2**40)),
        "commit_log_offset": draw(st.integers(0, 2**40)),
        "body": draw(tricky_text),
        "body_encoding": "utf-8",
        "tags": draw(st.none() | tricky_text),
        "keys": draw(st.lists(tricky_text, max_size=2)),
        "properties": draw(st.dictionaries(property_names, tricky_text, max_size=3)),
        "born_timestamp": draw(st.integers(0, 2**42)),
        "store_timestamp": draw(st.integers(0, 2**42)),
        "reconsume_times": draw(st.integers(0, 16)),
    }
    if retry:
        message["queue_topic"] = f"%RETRY%{GROUP}"
    if pop:
        message["receipt_handle"] = draw(tricky_text.filter(bool))
        message["delivery_attempt"] = draw(st.integers(1, 16))
        message["invisible_until"] = draw(st.integers(0, 2**42))
    return message


def answer(body: dict[str, Any]) -> BrokerAnswer:
    return BrokerAnswer(200, orjson.dumps(body), "application/json", {})


queues = st.lists(
    st.builds(
        lambda queue_id, offset, extra: {
            "topic": TOPIC,
            "queue_id": queue_id,
            "offset": offset,
            "next_offset": offset + extra,
            "max_offset": offset + extra * 2,
        },
        st.integers(0, 3),
        st.integers(0, 2**40),
        st.integers(0, 32),
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pulled=st.lists(messages(pop=False), max_size=6), queues=queues)
def test_group_pulls_relabelled_as_bytes_are_the_decoded_ones(
    pulled: list[dict[str, Any]], queues: list[dict[str, Any]]
) -> None:
    broker = answer({"group": GROUP, "topic": TOPIC, "messages": pulled, "queues": queues})
    parts = []
    for name in ("g1", "g2"):
        relabelled = relabel_pull(broker, ROUTE, name, GROUP)
        assert relabelled.count == len(pulled)
        expected = pull_before(ROUTE, GROUP, [(name, broker)])
        assert merged_pull(GROUP, ROUTE, [relabelled]) == expected
        parts.append(relabelled)
    both = pull_before(ROUTE, GROUP, [("g1", broker), ("g2", broker)])
    assert merged_pull(GROUP, ROUTE, parts) == both
    assert_pull_pieces(broker, parts[0])


def assert_pull_pieces(broker: BrokerAnswer, relabelled: Relabelled) -> None:
    """An answer made whole when relabelled has pieces that join as it: merged twice, or
    under another consumer group's head (joined, not taken whole)."""
    twice = pull_before(ROUTE, GROUP, [("g1", broker), ("g1", broker)])
    assert merged_pull(GROUP, ROUTE, [relabelled, relabelled]) == twice
    other = pull_before(ROUTE, OTHER, [("g1", broker)])
    assert merged_pull(OTHER, ROUTE, [relabelled]) == other


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(received=st.lists(messages(pop=True), max_size=6))
def test_pop_receives_relabelled_as_bytes_are_the_decoded_ones(
    received: list[dict[str, Any]],
) -> None:
    broker = answer({"group": GROUP, "topic": TOPIC, "messages": received})
    parts = []
    for name in ("g1", "g2"):
        relabelled = relabel_receive(broker, ROUTE, name, GROUP)
        assert relabelled.count == len(received)
        expected = receive_before(ROUTE, GROUP, [(name, broker)])
        assert merged_receive(GROUP, TOPIC, [relabelled]) == expected
        parts.append(relabelled)
    both = receive_before(ROUTE, GROUP, [("g1", broker), ("g2", broker)])
    assert merged_receive(GROUP, TOPIC, parts) == both
    twice = receive_before(ROUTE, GROUP, [("g1", broker), ("g1", broker)])
    assert merged_receive(GROUP, TOPIC, [parts[0], parts[0]]) == twice
    other = receive_before(ROUTE, OTHER, [("g1", broker)])
    assert merged_receive(OTHER, TOPIC, [parts[0]]) == other
