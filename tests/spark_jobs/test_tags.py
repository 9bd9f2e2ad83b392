"""Tag expressions of a replay, read as RocketMQ reads a subscription (no Spark here)."""

from __future__ import annotations

import pytest

from spark_jobs.replay.tags import parse_tag_expression


@pytest.mark.parametrize("expression", [None, "", "*", " * "])
def test_everything(expression: str | None) -> None:
    assert parse_tag_expression(expression) is None


@pytest.mark.parametrize("expression", ["||", " ", " || ", "||||", " ||  || "])
def test_an_expression_without_a_tag_selects_nothing(expression: str) -> None:
    assert parse_tag_expression(expression) == frozenset()


@pytest.mark.parametrize(
    ("expression", "tags"),
    [
        ("Paid", {"Paid"}),
        (" Paid || Shipped ", {"Paid", "Shipped"}),
        ("Paid||||Shipped||", {"Paid", "Shipped"}),
        ("a b", {"a b"}),  # only || separates; spaces inside a tag stay
    ],
)
def test_tags_are_split_at_double_bars_and_trimmed(expression: str, tags: set[str]) -> None:
    assert parse_tag_expression(expression) == frozenset(tags)
