"""The lean send path (bodies alone) stores and answers exactly what the general path does.

Two brokers on real stores take the same sends: one as the code runs, one with the lean path
turned off (``bodies_alone`` false, no lean encoder), both with the same clock and the same
UNIQ_KEYs. Hypothesis draws sends with and without tags, keys, properties, delivery times,
queues, sharding keys and idempotency keys (repeats included); every answer — receipts or
the refusal — and every byte of the two CommitLogs must be the same. The fingerprint of a
keyed send keeps the value an earlier version stored (a repeat after an upgrade matches).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import services.send
import storage.message_store
from services import Broker, OutgoingMessage
from services.send import bodies_alone, fingerprint
from tests.services.twin_brokers import commit_log_of, running_twins, stop_clocks


def _general_only(*_: object) -> Any:
    return None


def _message(**extras: st.SearchStrategy[Any]) -> st.SearchStrategy[OutgoingMessage]:
    """Messages with exactly the fields given drawn, every other one at its default."""
    return st.builds(
        lambda **fields: OutgoingMessage(**fields), body=st.binary(max_size=48), **extras
    )


PLAIN = _message()
MESSAGES = _message(
    tags=st.one_of(st.none(), st.sampled_from(["TagA", "é"])),
    keys=st.one_of(st.just(()), st.sampled_from([("k1",), ("k1", "k2")])),
    properties=st.one_of(st.just({}), st.sampled_from([{"color": "red"}, {"UNIQ_KEY": "mine"}])),
    queue_id=st.sampled_from([None, None, None, 1]),
    deliver_after_ms=st.sampled_from([None, None, None, 3_600_000]),
)
SENDS = st.tuples(
    st.sampled_from(["T", "U"]),
    st.lists(st.one_of(PLAIN, PLAIN, PLAIN, MESSAGES), min_size=1, max_size=5),
    st.one_of(st.none(), st.integers(0, 3)),
    st.one_of(st.none(), st.just("order-1")),
    st.sampled_from([None, None, "key-a", "key-b", "key-c", "key-d"]),
)


async def _answer(broker: Broker, send: tuple[Any, ...]) -> object:
    topic, messages, queue_id, sharding_key, key = send
    try:
        return await broker.send.send(
            topic,
            messages,
            batch_queue_id=queue_id,
            batch_sharding_key=sharding_key,
            idempotency_key=key,
        )
    except Exception as exc:  # the refusal itself is compared
        return (type(exc), str(exc))


def test_lean_sends_store_and_answer_what_general_sends_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_clocks(monkeypatch)
    general_root, lean_root = tmp_path / "general", tmp_path / "lean"
    with running_twins(general_root, lean_root) as (runner, general, lean):
        lean_sends: list[bool] = []

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(SENDS)
        def same(send: tuple[Any, ...]) -> None:
            with monkeypatch.context() as forced:
                forced.setattr(services.send, "bodies_alone", _general_only)
                forced.setattr(storage.message_store, "lean_batch", _general_only)
                expected = runner.run(_answer(general, send))
            lean_sends.append(bodies_alone(send[1]))
            assert runner.run(_answer(lean, send)) == expected

        same()
        assert commit_log_of(lean_root) == commit_log_of(general_root)
        assert any(lean_sends) and not all(lean_sends)


def _fingerprint_before(messages: Sequence[OutgoingMessage], delay_levels: Sequence[int]) -> str:
    """The fingerprint as an earlier version computed (and stored) it."""
    digest = hashlib.sha256()
    for message in messages:
        digest.update(message.body)
    described: tuple[object, ...] = (
        [len(m.body) for m in messages],
        list(delay_levels),
        [
            (number, m.tags, tuple(m.keys), sorted(m.properties.items()))
            for number, m in enumerate(messages)
            if m.tags is not None or m.keys or m.properties
        ],
    )
    timers = [(m.deliver_at, m.deliver_after_ms) for m in messages]
    if any(at is not None or after is not None for at, after in timers):
        described = (*described, timers)
    digest.update(repr(described).encode())
    return digest.hexdigest()[:32]


@given(st.lists(st.one_of(PLAIN, MESSAGES), min_size=1, max_size=6), st.integers(0, 2))
def test_a_fingerprint_matches_the_value_stored_before(
    messages: list[OutgoingMessage], level: int
) -> None:
    levels = [level] * len(messages)
    before = _fingerprint_before(messages, levels)
    assert fingerprint(messages, levels).matches(before)
    assert fingerprint(messages, levels, bodies_alone(messages)).matches(before)


def test_fingerprints_match_the_values_stored_before() -> None:
    plain = [OutgoingMessage(b"a"), OutgoingMessage(b"bc")]
    assert bodies_alone(plain)
    assert fingerprint(plain, [0, 0]).matches("337183492777f1ff74137d5c728c5d36")
    tagged = [OutgoingMessage(b"a", tags="T"), OutgoingMessage(b"bc", deliver_after_ms=5)]
    assert not bodies_alone(tagged)
    assert fingerprint(tagged, [0, 0]).matches("ced7916f3cb9149df97d8a410bb4e97c")
    assert not fingerprint(tagged, [0, 0]).matches("337183492777f1ff74137d5c728c5d36")


BODY_BATCHES = st.tuples(
    st.sampled_from(["T", "U", "T", "bad topic", "%RETRY%g"]),
    st.lists(st.binary(max_size=48), min_size=2, max_size=6),
    st.one_of(st.none(), st.integers(0, 3), st.just(99)),
    st.one_of(st.none(), st.just("order-1")),
)


async def _bodies_answer(broker: Broker, send: tuple[Any, ...]) -> object:
    topic, bodies, queue_id, sharding_key = send
    try:
        sent = await broker.send.send_bodies(
            topic, bodies, batch_queue_id=queue_id, batch_sharding_key=sharding_key
        )
    except Exception as exc:  # the refusal itself is compared
        return (type(exc), str(exc))
    return sent.receipts()


def test_bodies_sent_as_columns_store_and_answer_what_general_sends_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stop_clocks(monkeypatch)
    general_root, columns_root = tmp_path / "general", tmp_path / "columns"
    with running_twins(general_root, columns_root) as (runner, general, columns):
        answers: list[object] = []

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(BODY_BATCHES)
        def same(send: tuple[Any, ...]) -> None:
            topic, bodies, queue_id, sharding_key = send
            messages = [OutgoingMessage(body) for body in bodies]
            with monkeypatch.context() as forced:
                forced.setattr(services.send, "bodies_alone", _general_only)
                forced.setattr(storage.message_store, "lean_batch", _general_only)
                expected = runner.run(
                    _answer(general, (topic, messages, queue_id, sharding_key, None))
                )
            answer = runner.run(_bodies_answer(columns, send))
            answers.append(answer)
            assert answer == expected

        same()
        assert commit_log_of(columns_root) == commit_log_of(general_root)
        assert any(isinstance(a, list) for a in answers)
        assert any(isinstance(a, tuple) for a in answers)
