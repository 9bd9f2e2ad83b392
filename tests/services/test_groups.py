"""Consumer group names: the topic-name characters, matched in full, short enough for the
group's %RETRY% and %DLQ% topics."""

from __future__ import annotations

import pytest

from services.errors import InvalidGroupNameError
from services.groups import MAX_GROUP_LENGTH, check_group_name
from storage.topic_names import check_topic, dlq_topic, retry_topic


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("g\n", id="trailing-newline"),
        pytest.param("", id="empty"),
        pytest.param("a b", id="space"),
        pytest.param("g" * (MAX_GROUP_LENGTH + 1), id="too-long"),
        pytest.param("grüße", id="non-ascii"),
    ],
)
def test_invalid_group_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidGroupNameError):
        check_group_name(name)


def test_the_longest_group_still_has_valid_retry_and_dlq_topics() -> None:
    longest = "%|_-" + "g" * (MAX_GROUP_LENGTH - 4)
    assert check_group_name(longest) == longest
    check_topic(retry_topic(longest))
    check_topic(dlq_topic(longest))
