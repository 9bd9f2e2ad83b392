"""Topic names: the allowed characters in full (no trailing newline), and group topics."""

from __future__ import annotations

import pytest

from storage.codec import validate_topic
from storage.errors import InvalidTopicError
from storage.topic_names import (
    MAX_TOPIC_LENGTH,
    dlq_topic,
    is_dlq_topic,
    is_group_topic,
    is_retry_topic,
    is_valid_name,
    retry_topic,
)


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        pytest.param("Orders_1-b%|c", True, id="every-allowed-character"),
        pytest.param("x" * MAX_TOPIC_LENGTH, True, id="longest"),
        pytest.param("x" * (MAX_TOPIC_LENGTH + 1), False, id="too-long"),
        pytest.param("", False, id="empty"),
        pytest.param("Orders\n", False, id="trailing-newline"),
        pytest.param("Or ders", False, id="space"),
        pytest.param("Orders.eu", False, id="dot"),
    ],
)
def test_names_match_in_full(name: str, valid: bool) -> None:
    assert is_valid_name(name) is valid
    if valid:
        validate_topic(name)  # the store agrees
    else:
        with pytest.raises(InvalidTopicError):
            validate_topic(name)


def test_group_topics() -> None:
    assert retry_topic("g") == "%RETRY%g" and dlq_topic("g") == "%DLQ%g"
    assert is_retry_topic(retry_topic("g")) and not is_retry_topic(dlq_topic("g"))
    assert is_dlq_topic(dlq_topic("g")) and not is_dlq_topic("g%DLQ%")
    assert is_group_topic(retry_topic("g")) and is_group_topic(dlq_topic("g"))
    assert not is_group_topic("%pct%")
    assert is_valid_name(retry_topic("x" * 120)) and not is_valid_name(retry_topic("x" * 121))
