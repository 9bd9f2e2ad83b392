"""Cancel handles: RocketMQ's recall handle text, base64url; anything else is refused."""

from __future__ import annotations

import base64

import pytest

from services.errors import InvalidTimerHandleError
from services.timer.handles import TimerHandle, decode_handle


def test_a_handle_is_rocketmqs_recall_text_in_base64url() -> None:
    handle = TimerHandle("Orders", "broker-a", 1_700_000_001_001, "0A00000700AB").encode()
    text = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode()
    assert text == "v1 Orders broker-a 1700000001001 0A00000700AB"
    assert "=" not in handle
    parsed = decode_handle(handle)
    assert parsed.fire_ms == 1_700_000_001_000
    assert parsed == TimerHandle("Orders", "broker-a", 1_700_000_001_001, "0A00000700AB")


@pytest.mark.parametrize(
    "text", ["v2 Orders b 1 K", "v1 Orders b soon K", "v1 Orders b 1", "v1  b 1 K"]
)
def test_other_texts_are_refused(text: str) -> None:
    with pytest.raises(InvalidTimerHandleError):
        decode_handle(base64.urlsafe_b64encode(text.encode()).decode())
    with pytest.raises(InvalidTimerHandleError):
        decode_handle("%%%")
