"""The filter grammar: RocketMQ's precedence, its refusals, and the forms refused here that
RocketMQ's parser lets through (trailing tokens, a bare property, NOT before a property)."""

from __future__ import annotations

import pytest

from storage.sql92.lexer import FilterSyntaxError
from storage.sql92.syntax import (
    MAX_EXPRESSION_CHARS,
    MAX_NESTING,
    Compare,
    In,
    IsNull,
    Literal,
    Logic,
    Not,
    TextMatch,
    Value,
    parse,
)


def test_and_binds_tighter_than_or() -> None:
    tree = parse("a = 'x' OR b = 'y' AND c = 'z'")
    assert isinstance(tree, Logic) and tree.op == "OR"
    assert isinstance(tree.operands[1], Logic) and tree.operands[1].op == "AND"


def test_chains_of_one_operator_are_flat_in_order() -> None:
    tree = parse("a = '1' OR a = '2' OR a = '3'")
    assert isinstance(tree, Logic) and len(tree.operands) == 3
    assert [c.right.value for c in tree.operands if isinstance(c, Compare)] == ["1", "2", "3"]


def test_parentheses_group() -> None:
    tree = parse("(a = 'x' OR b = 'y') AND c = 'z'")
    assert isinstance(tree, Logic) and tree.op == "AND"
    assert isinstance(tree.operands[0], Logic) and tree.operands[0].op == "OR"


def test_between_is_rocketmq_rewrite() -> None:
    inside = parse("n BETWEEN 1 AND 5")
    assert isinstance(inside, Logic) and inside.op == "AND"
    assert [c.op for c in inside.operands if isinstance(c, Compare)] == [">=", "<="]
    outside = parse("n NOT BETWEEN 1 AND 5")
    assert isinstance(outside, Logic) and outside.op == "OR"
    assert [c.op for c in outside.operands if isinstance(c, Compare)] == ["<", ">"]


def test_every_form() -> None:
    assert parse("a IS NULL") == IsNull(Value(0, name="a"), negated=False)
    assert parse("a IS NOT NULL") == IsNull(Value(0, name="a"), negated=True)
    assert parse("a IN ('x', 'y')") == In("a", frozenset({"x", "y"}), negated=False)
    assert parse("a NOT IN ('x')") == In("a", frozenset({"x"}), negated=True)
    assert parse("a NOT CONTAINS 'x'") == TextMatch("CONTAINS", "a", "x", negated=True)
    assert parse("a STARTSWITH 'x'") == TextMatch("STARTSWITH", "a", "x", negated=False)
    assert parse("a ENDSWITH 'x'") == TextMatch("ENDSWITH", "a", "x", negated=False)
    assert parse("TRUE") == Literal(True)
    assert parse("NOT FALSE") == Not(Literal(False))
    assert parse("a <> -5") == Compare("<>", Value(0, name="a"), Value(5, value=-5))
    assert parse("a = +2.5") == Compare("=", Value(0, name="a"), Value(4, value=2.5))
    assert parse("a = TRUE") == Compare("=", Value(0, name="a"), Value(4, value=True))
    assert parse("a >= b") == Compare(">=", Value(0, name="a"), Value(5, name="b"))


def test_the_long_minimum_is_a_negated_literal() -> None:
    tree = parse("a > -9223372036854775808")
    assert isinstance(tree, Compare) and tree.right.value == -(2**63)


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        # trailing tokens: RocketMQ ignores them
        ("a = 'x' b = 'y'", 8, "AND, OR or the end"),
        ("a LIKE 'x%'", 2, "there is no LIKE"),
        ("a = 'x')", 7, "AND, OR or the end"),
        # a value where a condition belongs: RocketMQ makes it false
        ("a", 0, "a condition"),
        ("a = 'x' AND b", 12, "a condition"),
        ("'x' OR a = 'y'", 0, "a condition"),
        ("5", 0, "a condition"),
        # NOT before a property: (NOT a) = 'x' in RocketMQ's precedence
        ("NOT a = 'x'", 0, "NOT applies to a alone"),
        ("NOT a IS NULL", 0, "NOT applies to a alone"),
        # RocketMQ's own refusals
        ("a = NULL", 4, "IS NULL rather than = NULL"),
        ("a <> NULL", 5, "IS NULL"),
        ("a > 'x'", 2, "a number or a property"),
        ("a < TRUE", 2, "a number or a property"),
        ("TRUE = 5", 0, "constants of one type"),
        ("a BETWEEN 5 AND 1", 2, "a low bound at most the high one"),
        ("a BETWEEN 'x' AND 'y'", 2, "a number as a bound"),
        ("5 IN ('x')", 0, "a property before IN"),
        ("a IN (1, 2)", 6, "a string in the list of IN"),
        ("a IN ()", 6, "a string in the list of IN"),
        ("a CONTAINS 5", 11, "a string after CONTAINS"),
        ("5 IS NULL", 0, "a property or a condition"),
        ("(a = 1) > 2", 8, "a property or a constant on each side of >"),
        ("a NOT = 1", 6, "BETWEEN, IN, CONTAINS"),
        ("a IS 5", 5, "NULL after IS"),
        ("-a > 1", 0, "a number after -"),
        ("- 'x' = a", 0, "a number after -"),
        ("a = 9223372036854775808", 4, "an integer within 64 bits"),
        ("a = 1e999", 4, "a finite number"),
        ("(a = 'x'", 8, "a closing parenthesis"),
        ("", 0, "a property, a constant or a parenthesis"),
        ("a = ", 4, "a property, a constant or a parenthesis"),
    ],
)
def test_refusals_say_where_and_what_was_expected(text: str, position: int, expected: str) -> None:
    with pytest.raises(FilterSyntaxError) as refused:
        parse(text)
    assert refused.value.position == position, str(refused.value)
    assert expected in refused.value.expected, str(refused.value)


def test_zero_point_zero_is_a_constant() -> None:
    """RocketMQ refuses ``0.0`` (it checks constants against Double.MIN_VALUE, the smallest
    positive double): a bug, not a rule."""
    tree = parse("a = 0.0")
    assert isinstance(tree, Compare) and tree.right.value == 0.0


def test_length_and_nesting_are_bounded() -> None:
    long_list = "a IN (" + ", ".join(["'x'"] * 1200) + ")"
    with pytest.raises(FilterSyntaxError, match="at most 4096 characters"):
        parse(long_list)
    assert len(long_list) > MAX_EXPRESSION_CHARS
    nested = "(" * MAX_NESTING + "a = 1" + ")" * MAX_NESTING
    assert isinstance(parse(nested), Compare)
    with pytest.raises(FilterSyntaxError, match=f"at most {MAX_NESTING} nested levels"):
        parse("(" + nested + ")")
    with pytest.raises(FilterSyntaxError, match="nested levels"):
        parse("NOT " * (MAX_NESTING + 1) + "TRUE")
