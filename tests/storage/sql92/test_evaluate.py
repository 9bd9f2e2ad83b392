"""Filters evaluated on messages' properties: a table of RocketMQ's rules, and the compiled
closures against a plain tree-walking evaluator on random expressions (Hypothesis)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.sql92 import Sql92Filter
from storage.sql92.evaluate import compiled, matches
from storage.sql92.java_values import Unconvertible, compare, java_double
from storage.sql92.syntax import (
    Compare,
    Condition,
    In,
    IsNull,
    Literal,
    Logic,
    Not,
    TextMatch,
    Value,
    parse,
)

TABLE = [
    # strings: = and <> only; a missing property is unknown, and unknown never matches
    ("region = 'eu'", {"region": "eu"}, True),
    ("region = 'eu'", {"region": "EU"}, False),
    ("region = 'eu'", {}, False),
    ("region <> 'eu'", {"region": "us"}, True),
    ("region <> 'eu'", {}, False),
    ("NOT (region = 'eu')", {}, False),
    # numbers: the property converted to the constant's type
    ("amount > 100", {"amount": "250"}, True),
    ("amount > 100", {"amount": "99"}, False),
    ("amount = 10", {"amount": "010"}, True),
    ("amount = 10", {"amount": "10.0"}, False),  # Long.valueOf fails: no match
    ("amount <> 10", {"amount": "ten"}, False),  # an error is no match, negated or not
    ("amount = 10.0", {"amount": "10"}, True),
    ("amount >= 2.5", {"amount": "2.5"}, True),
    ("amount > 10", {"amount": "3000000000"}, True),
    ("amount > -1", {"amount": "-0"}, True),
    ("a > b", {"a": "2.5", "b": "10"}, False),  # two properties: as doubles
    ("a = b", {"a": "x", "b": "x"}, True),
    ("a = b", {}, True),  # RocketMQ: null equals null
    ("a = b", {"b": "x"}, False),
    # BETWEEN, IN, text matches, NULL tests
    ("n BETWEEN 1 AND 3", {"n": "3"}, True),
    ("n BETWEEN 1 AND 3", {"n": "4"}, False),
    ("n NOT BETWEEN 1 AND 3", {"n": "4"}, True),
    ("n NOT BETWEEN 1 AND 3", {}, False),
    ("c IN ('a', 'b')", {"c": "b"}, True),
    ("c NOT IN ('a', 'b')", {"c": "z"}, True),
    ("c NOT IN ('a', 'b')", {}, False),
    ("s CONTAINS 'ell'", {"s": "hello"}, True),
    ("s NOT CONTAINS 'ell'", {"s": "hello"}, False),
    ("s NOT CONTAINS 'xyz'", {}, False),  # missing: false with or without NOT
    ("s CONTAINS ''", {"s": "hello"}, False),  # an empty search: false
    ("s NOT CONTAINS ''", {"s": "hello"}, False),
    ("s STARTSWITH 'he' AND s ENDSWITH 'lo'", {"s": "hello"}, True),
    ("s NOT STARTSWITH 'he'", {"s": "hello"}, False),
    ("s IS NULL", {}, True),
    ("s IS NOT NULL", {"s": ""}, True),
    ("(s = 'x') IS NULL", {}, True),
    # booleans
    ("flag = TRUE", {"flag": "TRUE"}, True),
    ("flag = TRUE", {"flag": "yes"}, False),
    ("FALSE = flag", {"flag": "false"}, True),
    ("TRUE", {}, True),
    ("FALSE OR TRUE", {}, True),
    # three-valued logic, left to right with short circuits
    ("a = 'x' OR b = 'y'", {"b": "y"}, True),
    ("a = 'x' AND b = 'y'", {"b": "y"}, False),
    ("NOT (a = 'x' AND b = 'y')", {"b": "z"}, True),  # unknown AND false = false
    ("NOT (a = 'x' OR b = 'y')", {"b": "z"}, False),  # unknown OR false = unknown
    ("a = 'x' OR n > 5", {"a": "x", "n": "many"}, True),  # decided before the error
    ("n > 5 OR a = 'x'", {"a": "x", "n": "many"}, False),  # the error comes first
    ("a = 'x' AND n > 5", {"a": "y", "n": "many"}, False),
    # system properties are properties
    ("TAGS = 'TagA' AND KEYS = 'k1'", {"TAGS": "TagA", "KEYS": "k1"}, True),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), TABLE)
def test_rocketmq_rules(expression: str, properties: dict[str, str], expected: bool) -> None:
    assert Sql92Filter(expression).matches(properties) is expected


# ---------------------------------------------------------------- a reference evaluator


def reference(node: Condition | Value, properties: Mapping[str, str]) -> object:
    """A tree walk of RocketMQ's rules, written from its Java sources, node by node."""
    if isinstance(node, Value):
        return properties.get(node.name) if node.name is not None else node.value
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, Logic):
        results = []
        for operand in node.operands:
            value = reference(operand, properties)
            if value is (node.op == "OR"):
                return value
            results.append(value)
        return None if None in results else node.op == "AND"
    if isinstance(node, Not):
        value = reference(node.operand, properties)
        return None if value is None else not value
    if isinstance(node, IsNull):
        is_null = reference(node.operand, properties) is None
        return not is_null if node.negated else is_null
    if isinstance(node, In):
        value = properties.get(node.name)
        return None if value is None else (value in node.values) != node.negated
    if isinstance(node, TextMatch):
        value = properties.get(node.name)
        if value is None or not node.search:
            return False
        found = {
            "CONTAINS": node.search in value,
            "STARTSWITH": value.startswith(node.search),
            "ENDSWITH": value.endswith(node.search),
        }[node.kind]
        return found != node.negated
    assert isinstance(node, Compare)
    left, right = reference(node.left, properties), reference(node.right, properties)
    if node.op in ("=", "<>"):
        equal: bool | None
        if left is None and right is None:
            equal = True
        elif left is None:
            equal = None
        elif right is None:
            equal = False
        else:
            equal = (type(left) is type(right) and left == right) or compare(left, right) == 0  # type: ignore[arg-type]
        return equal if node.op == "=" or equal is None else not equal
    if left is None or right is None:
        return None
    if isinstance(left, str) and isinstance(right, str):
        left, right = java_double(left), java_double(right)
    order = compare(left, right)  # type: ignore[arg-type]
    return {"<": order < 0, "<=": order <= 0, ">": order > 0, ">=": order >= 0}[node.op]


def reference_matches(expression: str, properties: Mapping[str, str]) -> bool:
    try:
        return reference(parse(expression), properties) is True
    except Unconvertible:
        return False


NAMES = ["a", "b", "c"]
VALUES = ["", "0", "010", "10", "-3", "2.5", "1e3", "x", "abc", "true", "NaN"]
CONSTANTS = ["0", "10", "-3", "2.5", "'x'", "'10'", "'abc'", "TRUE", "FALSE", "1e3"]


@st.composite
def conditions(draw: st.DrawFn, depth: int = 0) -> str:
    kind = draw(st.integers(0, 8 if depth < 3 else 5))
    name = draw(st.sampled_from(NAMES))
    if kind == 0:
        op = draw(st.sampled_from(["=", "<>"]))
        other = draw(st.sampled_from([*CONSTANTS, *NAMES]))
        return f"{name} {op} {other}" if draw(st.booleans()) else f"{other} {op} {name}"
    if kind == 1:
        op = draw(st.sampled_from(["<", "<=", ">", ">="]))
        other = draw(st.sampled_from(["0", "10", "-3", "2.5", *NAMES]))
        return f"{name} {op} {other}"
    if kind == 2:
        low, high = sorted(
            draw(st.lists(st.sampled_from([-3, 0, 2.5, 10]), min_size=2, max_size=2))
        )
        return f"{name} {draw(st.sampled_from(['', 'NOT ']))}BETWEEN {low} AND {high}"
    if kind == 3:
        listed = ", ".join(draw(st.lists(st.sampled_from(["'x'", "'10'", "''"]), min_size=1)))
        return f"{name} {draw(st.sampled_from(['', 'NOT ']))}IN ({listed})"
    if kind == 4:
        match = draw(st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]))
        search = draw(st.sampled_from(["'a'", "'1'", "''", "'0'"]))
        return f"{name} {draw(st.sampled_from(['', 'NOT ']))}{match} {search}"
    if kind == 5:
        return f"{name} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == 6:
        return f"NOT ({draw(conditions(depth + 1))})"
    op = " AND " if kind == 7 else " OR "
    parts = draw(st.lists(conditions(depth + 1), min_size=2, max_size=3))
    return "(" + op.join(parts) + ")"


@settings(max_examples=300, deadline=None)
@given(
    expression=conditions(),
    messages=st.lists(
        st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES)), min_size=1, max_size=8
    ),
)
def test_compiled_filters_agree_with_the_reference(
    expression: str, messages: list[dict[str, str]]
) -> None:
    test = compiled(parse(expression))
    for properties in messages:
        assert matches(test, properties) == reference_matches(expression, properties), (
            expression,
            properties,
        )
