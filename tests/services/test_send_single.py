"""The single-message send path stores and answers exactly what the general path does.

Two brokers on real stores take the same sends: one as the code runs (a send of one message
that names no sharding key, with no batch queue or sharding key, takes the single path, with
an idempotency key or without), one with the single path turned off, both with the same clock
and the same UNIQ_KEYs. Idempotency keys are drawn from a few and every keyed send is sent
twice, so repeats (replayed receipts) and other payloads under a used key (refused) come up.
Hypothesis draws single messages with and without tags, keys and properties (bad ones too),
queues (one that does not exist too), delay levels, delivery times and born hosts, to good
and bad topics, and now and then a send the single path leaves to the general one; every
answer — receipts or the refusal — the traffic counted and every byte of the two CommitLogs
must be the same.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services import Broker, OutgoingMessage, SendReceipt
from tests.services.twin_brokers import (
    NOW_NS,
    commit_log_of,
    running_twins,
    stop_clocks,
)

NOW_MS = NOW_NS // 1_000_000


MESSAGES = st.builds(
    OutgoingMessage,
    body=st.binary(max_size=48),
    tags=st.sampled_from([None, None, "TagA", "é", "", "a||b"]),
    keys=st.sampled_from([(), (), ("k1",), ("k1", "k2"), ("a b",)]),
    properties=st.sampled_from([{}, {}, {"color": "red"}, {"UNIQ_KEY": "mine"}, {"DELAY": "1"}]),
    queue_id=st.sampled_from([None, None, 0, 1, 99, -1]),
    sharding_key=st.sampled_from([None, None, None, None, "order-1"]),
    delay_level=st.sampled_from([0, 0, 0, 1, 2, 3, -1]),
    deliver_after_ms=st.sampled_from([None, None, None, 0, 3_600_000, -5]),
    deliver_at=st.sampled_from([None, None, None, None, NOW_MS + 7_200_000, -1]),
)
SENDS = st.tuples(
    st.sampled_from(["T", "U", "T", "bad topic", "%RETRY%g", "SCHEDULE_TOPIC_XXXX"]),
    st.one_of(
        st.lists(MESSAGES, min_size=1, max_size=1),
        st.lists(MESSAGES, min_size=1, max_size=1),
        st.lists(MESSAGES, min_size=1, max_size=1),
        st.lists(MESSAGES, min_size=0, max_size=3),
    ),
    st.sampled_from([None, None, None, None, 2]),  # the batch's queue
    st.sampled_from([None, None, None, None, "order-2"]),  # the batch's sharding key
    st.sampled_from([None, None, None, None, "key-a", "key-b"]),  # the idempotency key
    st.sampled_from([("127.0.0.1", 5000), ("10.1.2.3", 1), ("example.org", 7), ("::1", 9)]),
)


async def _answer(broker: Broker, send: tuple[Any, ...]) -> object:
    topic, messages, queue_id, sharding_key, key, host = send
    try:
        return await broker.send.send(
            topic,
            messages,
            batch_queue_id=queue_id,
            batch_sharding_key=sharding_key,
            born_host=host,
            idempotency_key=key,
        )
    except Exception as exc:  # the refusal itself is compared
        return (type(exc), str(exc))


def _counted(
    send_one: Callable[..., Awaitable[list[SendReceipt]]], taken: list[tuple[Any, ...]]
) -> Callable[..., Awaitable[list[SendReceipt]]]:
    async def counting(*args: Any) -> list[SendReceipt]:
        taken.append(args)
        return await send_one(*args)

    return counting


def test_single_sends_store_and_answer_what_general_sends_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_clocks(monkeypatch)
    general_root, single_root = tmp_path / "general", tmp_path / "single"
    with running_twins(general_root, single_root) as (runner, general, single):
        general.send._single_path = False
        taken: list[tuple[Any, ...]] = []
        monkeypatch.setattr(single.send, "_send_one", _counted(single.send._send_one, taken))
        answers: list[object] = []

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(SENDS)
        def same(send: tuple[Any, ...]) -> None:
            expected = runner.run(_answer(general, send))
            answer = runner.run(_answer(single, send))
            answers.append(answer)
            assert answer == expected
            if send[4] is not None:  # its repeat, replayed (or refused) the same way
                expected = runner.run(_answer(general, send))
                answer = runner.run(_answer(single, send))
                answers.append(answer)
                assert answer == expected

        same()
        once = ("T", [OutgoingMessage(b"once")], None, None, "key-once", ("10.1.2.3", 1))
        for _ in range(2):  # stored, then replayed, on both paths
            answer = runner.run(_answer(single, once))
            assert answer == runner.run(_answer(general, once))
            answers.append(answer)
        assert isinstance(answer, list) and answer[0].replayed
        assert commit_log_of(single_root) == commit_log_of(general_root)
        assert single.metrics.messages_in == general.metrics.messages_in
        assert single.metrics.bytes_in == general.metrics.bytes_in
        assert taken, "the single path was taken"
        assert any(args[3] is not None for args in taken), "keyed sends took it too"
        assert single.metrics.sends_replayed == general.metrics.sends_replayed
        assert any(isinstance(a, list) for a in answers), "some sends were stored"
        assert any(isinstance(a, tuple) for a in answers), "some were refused"


async def test_a_single_send_goes_round_robin_over_the_write_queues(broker: Broker) -> None:
    sent = [await broker.send.send("Orders", [OutgoingMessage(b"x")]) for _ in range(10)]
    queues = [receipt.queue_id for [receipt] in sent]
    count = broker.topics.get("Orders").write_queue_nums
    assert queues == [i % count for i in range(10)]
    [named] = await broker.send.send("Orders", [OutgoingMessage(b"y", queue_id=count - 1)])
    assert (named.queue_id, named.queue_offset) == (count - 1, 10 // count)
