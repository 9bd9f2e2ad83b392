"""What a send holds besides where it goes (``services.send_payload``): which sends are bodies
alone, and the fingerprint a repeat of a keyed send must match — a value stored in the first
record of every keyed send: its form may change between versions only while the earlier form
is still matched."""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.outgoing import OutgoingMessage
from services.send_payload import VERSION, earlier_form, fingerprint, plain
from storage.record.layout import body_crcs

BODIES = st.lists(st.binary(max_size=64), min_size=1, max_size=8)


def documented(bodies: list[bytes], described: object) -> str:
    """The fingerprint as the module documents it: SHA-256 over the repr of the described
    part, then each body's CRC-32 masked to 31 bits, four bytes big-endian."""
    crcs = b"".join(struct.pack(">I", zlib.crc32(body) & 0x7FFFFFFF) for body in bodies)
    return VERSION + hashlib.sha256(repr(described).encode() + crcs).hexdigest()[:32]


def before(bodies: list[bytes], described: object) -> str:
    """The fingerprint as earlier versions stored it: SHA-256 over the bodies, then the repr."""
    return hashlib.sha256(b"".join(bodies) + repr(described).encode()).hexdigest()[:32]


def bodies_fingerprint(bodies: list[bytes], levels: list[int]) -> str:
    """The fingerprint of a send of ``bodies`` alone."""
    return fingerprint([OutgoingMessage(body) for body in bodies], levels).value


@given(BODIES, st.data())
def test_what_the_caller_knows_of_a_send_does_not_change_its_fingerprint(
    bodies: list[bytes], data: st.DataObject
) -> None:
    levels = data.draw(st.lists(st.integers(0, 18), min_size=len(bodies), max_size=len(bodies)))
    messages = [OutgoingMessage(body) for body in bodies]
    made = fingerprint(messages, levels).value
    assert fingerprint(messages, levels, crcs=body_crcs(bodies)).value == made
    assert fingerprint(messages, levels, alone=True).value == made


def test_the_fingerprint_is_the_documented_digest() -> None:
    messages = [OutgoingMessage(b"ab"), OutgoingMessage(b"c", tags="t", keys=("k",))]
    described: tuple[object, ...] = ([2, 1], [0, 0], [(1, "t", ("k",), [])])
    made = fingerprint(messages, [0, 0])
    assert made.value == documented([b"ab", b"c"], described)
    assert made.matches(made.value)
    assert made.matches(before([b"ab", b"c"], described))  # stored by an earlier version
    one: tuple[object, ...] = ([1], [3], [])
    assert bodies_fingerprint([b"x"], [3]) == documented([b"x"], one)
    assert earlier_form([b"x"], repr(one)) == before([b"x"], one)


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
    described: tuple[object, ...] = (list(map(len, bodies)), levels, [])
    made = fingerprint([OutgoingMessage(body) for body in bodies], levels)
    assert made.value == documented(bodies, described)
    assert made.matches(before(bodies, described))


def test_a_fingerprint_matches_no_other_payload_in_either_form() -> None:
    made = fingerprint([OutgoingMessage(b"ab"), OutgoingMessage(b"c")], [0, 0])
    other = [b"a", b"bc"]
    assert not made.matches(bodies_fingerprint(other, [0, 0]))
    assert not made.matches(before(other, ([1, 2], [0, 0], [])))
    assert not made.matches(None)
    # a stored value of the present form is never taken for the earlier one
    assert not made.matches(VERSION + before([b"ab", b"c"], ([2, 1], [0, 0], [])))


def test_bodies_of_the_same_length_and_crc_share_a_fingerprint() -> None:
    """What the fingerprint gives up for its speed, as documented: the CRC, not the bytes."""
    # CRC-32 is linear: a ^ b ^ c has the CRC of a ^ crc(b) ^ crc(c) for equal lengths.
    a, b, c = b"\x01" * 8, b"\x02" * 8, b"\x00" * 8
    d = bytes(x ^ y ^ z for x, y, z in zip(a, b, c, strict=True))
    assert zlib.crc32(d) == zlib.crc32(a) ^ zlib.crc32(b) ^ zlib.crc32(c)
    e = bytes(x ^ y for x, y in zip(a, b, strict=True))  # = d, as c is zeros
    assert bodies_fingerprint([d], [0]) == bodies_fingerprint([e], [0])


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
def test_the_fingerprint_of_one_message_is_the_documented_digest(
    body: bytes, level: int, extras: dict[str, object]
) -> None:
    message = OutgoingMessage(body, **extras)  # type: ignore[arg-type]
    made = fingerprint([message], [level])
    if not (extras.keys() - {"queue_id"}):
        described: tuple[object, ...] = ([len(body)], [level], [])
        assert made.value == documented([body], described)
        assert made.matches(before([body], described))


def test_a_timed_send_adds_its_times_and_an_untimed_one_does_not() -> None:
    untimed = fingerprint([OutgoingMessage(b"x")], [0]).value
    timed = fingerprint([OutgoingMessage(b"x", deliver_after_ms=5)], [0]).value
    at = fingerprint([OutgoingMessage(b"x", deliver_at=5)], [0]).value
    assert len({untimed, timed, at}) == 3


@given(BODIES, st.integers(0, 7), st.text(min_size=1, max_size=5))
def test_where_a_send_goes_is_not_part_of_its_fingerprint(
    bodies: list[bytes], queue_id: int, sharding_key: str
) -> None:
    alone = [OutgoingMessage(body) for body in bodies]
    queued = [OutgoingMessage(body, queue_id=queue_id) for body in bodies]
    keyed = [OutgoingMessage(body, sharding_key=sharding_key) for body in bodies]
    made = fingerprint(alone, [0] * len(bodies)).value
    assert fingerprint(queued, [0] * len(bodies)).value == made
    assert fingerprint(keyed, [0] * len(bodies)).value == made
    assert plain(queued) and plain(keyed)


def test_different_payloads_have_different_fingerprints() -> None:
    base = fingerprint([OutgoingMessage(b"ab"), OutgoingMessage(b"c")], [0, 0])
    for other in (
        fingerprint([OutgoingMessage(b"a"), OutgoingMessage(b"bc")], [0, 0]),
        fingerprint([OutgoingMessage(b"ab"), OutgoingMessage(b"d")], [0, 0]),
        fingerprint([OutgoingMessage(b"ab"), OutgoingMessage(b"c")], [1, 0]),
        fingerprint([OutgoingMessage(b"ab"), OutgoingMessage(b"c", tags="t")], [0, 0]),
    ):
        assert other.value != base.value
        assert not base.matches(other.value)


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
def test_any_extra_makes_a_send_not_plain(extra: dict[str, object]) -> None:
    messages = [OutgoingMessage(b"x"), OutgoingMessage(b"y", **extra)]  # type: ignore[arg-type]
    assert not plain(messages)
    assert plain(messages[:1])


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
    assert fingerprint(messages, levels, alone=plain(messages)).matches(before)


def test_fingerprints_match_the_values_stored_before() -> None:
    alone = [OutgoingMessage(b"a"), OutgoingMessage(b"bc")]
    assert plain(alone)
    assert fingerprint(alone, [0, 0]).matches("337183492777f1ff74137d5c728c5d36")
    tagged = [OutgoingMessage(b"a", tags="T"), OutgoingMessage(b"bc", deliver_after_ms=5)]
    assert not plain(tagged)
    assert fingerprint(tagged, [0, 0]).matches("ced7916f3cb9149df97d8a410bb4e97c")
    assert not fingerprint(tagged, [0, 0]).matches("337183492777f1ff74137d5c728c5d36")
