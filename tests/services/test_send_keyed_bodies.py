"""A keyed batch of bodies alone sent as columns stores and answers what the general keyed
send does.

Two brokers on real stores with the same clock and UNIQ_KEYs take the same keyed batches: one
through :meth:`SendService.send` (the general keyed path), one through
:meth:`SendService.send_bodies_once`. Keys are drawn from a few, so repeats (replayed
receipts) and other payloads under a used key (refused) come up; every answer and every byte
of the two CommitLogs must be the same.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services import Broker, OutgoingMessage
from services.errors import IdempotencyKeyReusedError
from tests.services.twin_brokers import commit_log_of, running_twins, start_twin, stop_clocks

KEYED_BATCHES = st.tuples(
    st.sampled_from(["T", "U", "T", "bad topic", "%RETRY%g"]),
    st.lists(st.sampled_from([b"", b"a", b"bb", b"\x00\xff" * 9]), min_size=2, max_size=5),
    st.one_of(st.none(), st.integers(0, 3), st.just(99)),
    st.one_of(st.none(), st.just("order-1")),
    st.sampled_from(["key-a", "key-b", "key-c", "bad key"]),
)


async def _general(broker: Broker, send: tuple[Any, ...]) -> object:
    topic, bodies, queue_id, sharding_key, key = send
    try:
        return await broker.send.send(
            topic,
            [OutgoingMessage(body) for body in bodies],
            batch_queue_id=queue_id,
            batch_sharding_key=sharding_key,
            idempotency_key=key,
        )
    except Exception as exc:  # the refusal itself is compared
        return (type(exc), str(exc))


async def _columns(broker: Broker, send: tuple[Any, ...]) -> object:
    topic, bodies, queue_id, sharding_key, key = send
    try:
        sent = await broker.send.send_bodies_once(
            topic, bodies, key, batch_queue_id=queue_id, batch_sharding_key=sharding_key
        )
    except Exception as exc:  # the refusal itself is compared
        return (type(exc), str(exc))
    return sent if isinstance(sent, list) else sent.receipts()


def test_keyed_bodies_sent_as_columns_store_and_answer_what_general_keyed_sends_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_clocks(monkeypatch)
    general_root, columns_root = tmp_path / "general", tmp_path / "columns"
    with running_twins(general_root, columns_root) as (runner, general, columns):
        answers: list[object] = []

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(KEYED_BATCHES)
        def same(send: tuple[Any, ...]) -> None:
            expected = runner.run(_general(general, send))
            answer = runner.run(_columns(columns, send))
            answers.append(answer)
            assert answer == expected
            assert runner.run(_columns(columns, send)) == runner.run(_general(general, send))

        same()
        assert commit_log_of(columns_root) == commit_log_of(general_root)
        remembered = [b.send._idempotency for b in (general, columns)]
        assert remembered[0] is not None and remembered[1] is not None
        assert remembered[0].unindexed_count == remembered[1].unindexed_count
        assert any(isinstance(a, list) and not a[0].replayed for a in answers)
        assert any(isinstance(a, tuple) for a in answers)


def test_a_repeat_replays_the_receipts_and_another_payload_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = await start_twin(tmp_path / "store")
        try:
            sent = await broker.send.send_bodies_once("T", [b"a", b"b"], "k")
            assert not isinstance(sent, list)
            first = sent.receipts()
            again = await broker.send.send_bodies_once("T", [b"a", b"b"], "k")
            assert isinstance(again, list)
            assert [r.replayed for r in again] == [True, True]
            assert [r.msg_id for r in again] == [r.msg_id for r in first]
            assert [r.uniq_key for r in again] == [r.uniq_key for r in first]
            general = await broker.send.send(
                "T", [OutgoingMessage(b"a"), OutgoingMessage(b"b")], idempotency_key="k"
            )
            assert general == again
            with pytest.raises(IdempotencyKeyReusedError):
                await broker.send.send_bodies_once("T", [b"a", b"c"], "k")
        finally:
            await broker.stop()

    asyncio.run(scenario())
