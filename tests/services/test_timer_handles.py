"""Cancel handles: RocketMQ's recall handle text naming the broker group, base64url; handles
naming the broker (v1) are still read; anything else is refused."""

from __future__ import annotations

import base64

import pytest

from services.errors import InvalidTimerHandleError
from services.timer.handles import TimerHandle, decode_handle


def encoded(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_a_handle_is_the_recall_text_naming_the_group_in_base64url() -> None:
    handle = TimerHandle("Orders", "g1", 1_700_000_001_001, "0A00000700AB").encode()
    text = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
    assert text == "v2 Orders g1 1700000001001 0A00000700AB"
    assert "=" not in handle
    parsed = decode_handle(handle)
    assert parsed.fire_ms == 1_700_000_001_000
    assert parsed == TimerHandle("Orders", "g1", 1_700_000_001_001, "0A00000700AB")
    assert parsed.names_group


def test_a_handle_naming_the_broker_is_still_read() -> None:
    parsed = decode_handle(encoded("v1 Orders broker-a 1700000001001 0A00000700AB"))
    assert parsed == TimerHandle("Orders", "broker-a", 1_700_000_001_001, "0A00000700AB", "v1")
    assert not parsed.names_group
    assert parsed.encode() == encoded("v1 Orders broker-a 1700000001001 0A00000700AB")


@pytest.mark.parametrize(
    "text", ["v3 Orders b 1 K", "v2 Orders b soon K", "v1 Orders b 1", "v2  b 1 K"]
)
def test_other_texts_are_refused(text: str) -> None:
    with pytest.raises(InvalidTimerHandleError):
        decode_handle(encoded(text))
    with pytest.raises(InvalidTimerHandleError):
        decode_handle("%%%")
