"""The filter's tokens: RocketMQ's lexical rules, and where an unreadable character is."""

from __future__ import annotations

import pytest

from storage.sql92.lexer import FilterSyntaxError, tokens


def kinds_and_values(text: str) -> list[tuple[str, object]]:
    return [(t.kind, t.value) for t in tokens(text)]


def test_keywords_are_case_insensitive_and_identifiers_keep_their_case() -> None:
    assert kinds_and_values("Region is not null And amount") == [
        ("ID", "Region"),
        ("IS", "IS"),
        ("NOT", "NOT"),
        ("NULL", "NULL"),
        ("AND", "AND"),
        ("ID", "amount"),
        ("END", ""),
    ]


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        ("0", "INTEGER", 0),
        ("42", "INTEGER", 42),
        ("42L", "INTEGER", 42),
        ("5.", "FLOAT", 5.0),
        (".5", "FLOAT", 0.5),
        ("5.5E2", "FLOAT", 550.0),
        ("5E-1", "FLOAT", 0.5),
        ("0.0", "FLOAT", 0.0),
        ("'it''s'", "STRING", "it's"),
        ("''", "STRING", ""),
        ("$a_1", "ID", "$a_1"),
    ],
)
def test_constants_and_names(text: str, kind: str, value: object) -> None:
    assert kinds_and_values(text) == [(kind, value), ("END", "")]


def test_a_leading_zero_ends_an_integer() -> None:
    """``0`` is an integer of its own (no octal): ``010`` is two tokens."""
    assert kinds_and_values("010") == [("INTEGER", 0), ("INTEGER", 10), ("END", "")]


def test_comments_and_whitespace_are_skipped_and_positions_kept() -> None:
    found = tokens("a -- one\n /* two\n */ >= 1")
    assert [(t.kind, t.position) for t in found] == [
        ("ID", 0),
        (">=", 21),
        ("INTEGER", 24),
        ("END", 25),
    ]


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        ("a = 'open", 4, "a closing quote"),
        ("a != 1", 2, "<>"),
        ('a = "x"', 4, "single quotes"),
        ("a = #", 4, "a property, a constant"),
    ],
)
def test_unreadable_characters_are_refused_where_they_are(
    text: str, position: int, expected: str
) -> None:
    with pytest.raises(FilterSyntaxError) as refused:
        tokens(text)
    assert refused.value.position == position
    assert expected in refused.value.expected
