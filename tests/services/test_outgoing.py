"""A producer's message and its rules: what check_message refuses and lets through, and when a
timer message asks to be delivered."""

from __future__ import annotations

import pytest

from services.errors import InvalidPropertyError
from services.outgoing import (
    NO_PROPERTIES,
    RESERVED_PROPERTIES,
    OutgoingMessage,
    check_message,
    deliver_time_of,
)
from storage.record.properties import BOOKKEEPING_PROPERTIES


def test_a_message_gives_a_body_and_nothing_else_by_default() -> None:
    message = OutgoingMessage(b"x")
    assert message == (b"x", None, (), NO_PROPERTIES, None, None, 0, None, None)
    with pytest.raises(TypeError):
        NO_PROPERTIES["a"] = "b"  # type: ignore[index]  # one shared mapping: read-only


@pytest.mark.parametrize(
    "message",
    [
        OutgoingMessage(b"x"),
        OutgoingMessage(b"", tags="TagA", keys=("k1", "k2"), properties={"color": "red"}),
        OutgoingMessage(b"x", tags="é", properties={"UNIQ_KEY": "mine"}),
    ],
)
def test_ordinary_tags_keys_and_properties_pass(message: OutgoingMessage) -> None:
    check_message(message)


@pytest.mark.parametrize(
    ("message", "says"),
    [
        (OutgoingMessage(b"x", tags=""), "tags may not be empty"),
        (OutgoingMessage(b"x", tags="a||b"), "'||'"),
        (OutgoingMessage(b"x", tags="a\x01b"), "\\\\x01"),
        (OutgoingMessage(b"x", keys=("",)), "a key may not be empty"),
        (OutgoingMessage(b"x", keys=("a b",)), "may not contain a space"),
        (OutgoingMessage(b"x", keys=("a\x02",)), "\\\\x02"),
        (OutgoingMessage(b"x", properties={"": "v"}), "a property name may not be empty"),
        (OutgoingMessage(b"x", properties={"a": ""}), "property 'a' may not be empty"),
        (OutgoingMessage(b"x", properties={"a\x01": "v"}), "\\\\x01"),
        (OutgoingMessage(b"x", properties={"KEYS": "k"}), "reserved for the broker"),
        (OutgoingMessage(b"x", properties={"TIMER_OUT_MS": "1"}), "reserved for the broker"),
    ],
)
def test_what_a_record_cannot_hold_is_refused(message: OutgoingMessage, says: str) -> None:
    with pytest.raises(InvalidPropertyError, match=says):
        check_message(message)


def test_the_broker_keeps_its_own_properties() -> None:
    for name in ("TAGS", "KEYS", "DELAY", "REAL_TOPIC", "TRAN_MSG", "TIMER_DELIVER_MS"):
        assert name in RESERVED_PROPERTIES
    # and its bookkeeping, which no reader is shown: a producer's own would vanish
    assert BOOKKEEPING_PROPERTIES <= RESERVED_PROPERTIES
    assert "UNIQ_KEY" not in RESERVED_PROPERTIES, "a producer may give its own"


def test_when_a_timer_message_is_delivered() -> None:
    assert deliver_time_of(OutgoingMessage(b"x"), 1_000) is None
    assert deliver_time_of(OutgoingMessage(b"x", deliver_at=5), 1_000) == 5
    assert deliver_time_of(OutgoingMessage(b"x", deliver_after_ms=250), 1_000) == 1_250
    assert deliver_time_of(OutgoingMessage(b"x", deliver_after_ms=0), 1_000) is None, "at once"


@pytest.mark.parametrize(
    ("message", "says"),
    [
        (OutgoingMessage(b"x", deliver_at=5, deliver_after_ms=5), "not both"),
        (OutgoingMessage(b"x", deliver_at=-1), "deliver_at must be a time"),
        (OutgoingMessage(b"x", deliver_after_ms=-1), "deliver_after_ms must be 0 or more"),
    ],
)
def test_a_delivery_time_that_makes_no_sense_is_refused(
    message: OutgoingMessage, says: str
) -> None:
    with pytest.raises(InvalidPropertyError, match=says):
        deliver_time_of(message, 1_000)
