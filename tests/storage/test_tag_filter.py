"""Tag expressions, read as RocketMQ's FilterAPI reads them: one rule for pulls and replay."""

from __future__ import annotations

import pytest

from storage.tag_filter import TagFilter, subscribed_tags


@pytest.mark.parametrize("expression", [None, "", "*"])
def test_everything(expression: str | None) -> None:
    assert subscribed_tags(expression) is None
    assert TagFilter(expression).matches_all


def test_a_padded_star_is_the_tag_star() -> None:
    # FilterAPI compares the whole expression with "*" before trimming the pieces.
    assert subscribed_tags(" * ") == frozenset({"*"})
    assert not TagFilter(" * ").matches_tags("Paid")


@pytest.mark.parametrize("expression", ["||", " ", " || ", "||||", " ||  || "])
def test_an_expression_without_a_tag_selects_nothing(expression: str) -> None:
    assert subscribed_tags(expression) == frozenset()
    tag_filter = TagFilter(expression)
    assert not tag_filter.matches_tags("Paid") and not tag_filter.matches_tags(None)


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
    assert subscribed_tags(expression) == frozenset(tags)
