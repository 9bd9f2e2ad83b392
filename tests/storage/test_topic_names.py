"""Topic names: the allowed characters in full (no trailing newline), and group topics."""

from __future__ import annotations

import pytest

from storage.errors import InvalidTopicError
from storage.topic_names import (
    MAX_TOPIC_LENGTH,
    check_topic,
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
        check_topic(name)  # the store agrees
    else:
        with pytest.raises(InvalidTopicError):
            check_topic(name)


def test_group_topics() -> None:
    assert retry_topic("g") == "%RETRY%g" and dlq_topic("g") == "%DLQ%g"
    assert is_retry_topic(retry_topic("g")) and not is_retry_topic(dlq_topic("g"))
    assert is_dlq_topic(dlq_topic("g")) and not is_dlq_topic("g%DLQ%")
    assert is_group_topic(retry_topic("g")) and is_group_topic(dlq_topic("g"))
    assert not is_group_topic("%pct%")
    assert is_valid_name(retry_topic("x" * 120)) and not is_valid_name(retry_topic("x" * 121))


@pytest.mark.parametrize(
    "topic",
    [
        pytest.param("", id="empty"),
        pytest.param("a" * 128, id="128-chars"),
        pytest.param("a/b", id="slash"),
        pytest.param("../x", id="dot-dot"),
        pytest.param("a b", id="space"),
        pytest.param("tøpic", id="unicode"),
        pytest.param("abc\n", id="trailing-newline"),
        pytest.param("a.b", id="dot"),
    ],
)
def test_check_topic_rejects(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        check_topic(topic)


@pytest.mark.parametrize(
    "topic",
    [
        pytest.param("a" * 127, id="127-chars"),
        pytest.param("%RETRY%group_1", id="retry"),
        pytest.param("A|b-C_9", id="pipe-dash-underscore"),
    ],
)
def test_check_topic_accepts(topic: str) -> None:
    assert check_topic(topic) == topic
