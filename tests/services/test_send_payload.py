"""What a send holds besides where it goes (``services.send_payload``): which sends are bodies
alone, and the fingerprint a repeat of a keyed send must match — a value stored in the first
record of every keyed send, so it may not change between versions."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.outgoing import OutgoingMessage
from services.send_payload import bodies_alone, bodies_fingerprint, fingerprint, one_fingerprint

BODIES = st.lists(st.binary(max_size=64), min_size=1, max_size=8)


@given(BODIES, st.data())
def test_the_fingerprint_of_bodies_is_that_of_their_messages(
    bodies: list[bytes], data: st.DataObject
) -> None:
    levels = data.draw(st.lists(st.integers(0, 18), min_size=len(bodies), max_size=len(bodies)))
    messages = [OutgoingMessage(body) for body in bodies]
    assert bodies_fingerprint(bodies, levels) == fingerprint(messages, levels)
    assert fingerprint(messages, levels, alone=True) == fingerprint(messages, levels)


def test_the_fingerprint_is_the_documented_digest() -> None:
    """SHA-256 over the bodies, then the repr of their lengths, delay levels and extras:
    records stored by earlier versions carry fingerprints made this way."""
    messages = [OutgoingMessage(b"ab"), OutgoingMessage(b"c", tags="t", keys=("k",))]
    described: tuple[object, ...] = ([2, 1], [0, 0], [(1, "t", ("k",), [])])
    expected = hashlib.sha256(b"abc" + repr(described).encode()).hexdigest()[:32]
    assert fingerprint(messages, [0, 0]) == expected
    plain: tuple[object, ...] = ([1], [3], [])
    assert (
        bodies_fingerprint([b"x"], [3])
        == hashlib.sha256(b"x" + repr(plain).encode()).hexdigest()[:32]
    )


@given(BODIES, st.data())
def test_the_fingerprint_of_bodies_is_the_documented_digest(
    bodies: list[bytes], data: st.DataObject
) -> None:
    """Written out at once for equal lengths or levels, it is still the repr's digest."""
    count = len(bodies)
    levels = data.draw(
        st.one_of(
            st.lists(st.integers(0, 18), min_size=count, max_size=count),
            st.integers(0, 18).map(lambda level: [level] * count),
        )
    )
    if data.draw(st.booleans()):
        bodies = [bodies[0]] * count  # one length
    described = repr((list(map(len, bodies)), levels, []))
    expected = hashlib.sha256(b"".join(bodies) + described.encode()).hexdigest()[:32]
    assert bodies_fingerprint(bodies, levels) == expected


EXTRAS = st.fixed_dictionaries(
    {},
    optional={
        "tags": st.text(max_size=3),
        "keys": st.lists(st.text(min_size=1, max_size=3), max_size=2).map(tuple),
        "properties": st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=2),
        "deliver_after_ms": st.integers(0, 10),
        "deliver_at": st.integers(0, 10),
        "queue_id": st.integers(0, 7),
    },
)


@given(st.binary(max_size=64), st.integers(0, 18), EXTRAS)
def test_the_fingerprint_of_one_message_is_that_of_a_send_of_it(
    body: bytes, level: int, extras: dict[str, object]
) -> None:
    message = OutgoingMessage(body, **extras)  # type: ignore[arg-type]
    assert one_fingerprint(message, level) == fingerprint([message], [level])
    if not (extras.keys() - {"queue_id"}):
        described = repr(([len(body)], [level], []))
        expected = hashlib.sha256(body + described.encode()).hexdigest()[:32]
        assert one_fingerprint(message, level) == expected


def test_a_timed_send_adds_its_times_and_an_untimed_one_does_not() -> None:
    untimed = fingerprint([OutgoingMessage(b"x")], [0])
    timed = fingerprint([OutgoingMessage(b"x", deliver_after_ms=5)], [0])
    at = fingerprint([OutgoingMessage(b"x", deliver_at=5)], [0])
    assert len({untimed, timed, at}) == 3


@given(BODIES, st.integers(0, 7), st.text(min_size=1, max_size=5))
def test_where_a_send_goes_is_not_part_of_its_fingerprint(
    bodies: list[bytes], queue_id: int, sharding_key: str
) -> None:
    plain = [OutgoingMessage(body) for body in bodies]
    queued = [OutgoingMessage(body, queue_id=queue_id) for body in bodies]
    keyed = [OutgoingMessage(body, sharding_key=sharding_key) for body in bodies]
    assert fingerprint(plain, [0] * len(bodies)) == fingerprint(queued, [0] * len(bodies))
    assert fingerprint(plain, [0] * len(bodies)) == fingerprint(keyed, [0] * len(bodies))
    assert bodies_alone(queued) and bodies_alone(keyed)


def test_different_payloads_have_different_fingerprints() -> None:
    base = fingerprint([OutgoingMessage(b"ab"), OutgoingMessage(b"c")], [0, 0])
    assert fingerprint([OutgoingMessage(b"a"), OutgoingMessage(b"bc")], [0, 0]) != base
    assert fingerprint([OutgoingMessage(b"ab"), OutgoingMessage(b"c")], [1, 0]) != base
    assert fingerprint([OutgoingMessage(b"ab"), OutgoingMessage(b"c", tags="t")], [0, 0]) != base


@pytest.mark.parametrize(
    "extra",
    [
        {"tags": "t"},
        {"keys": ("k",)},
        {"properties": {"a": "b"}},
        {"delay_level": 2},
        {"deliver_after_ms": 10},
        {"deliver_at": 10},
    ],
)
def test_any_extra_makes_a_send_more_than_bodies(extra: dict[str, object]) -> None:
    messages = [OutgoingMessage(b"x"), OutgoingMessage(b"y", **extra)]  # type: ignore[arg-type]
    assert not bodies_alone(messages)
    assert bodies_alone(messages[:1])
