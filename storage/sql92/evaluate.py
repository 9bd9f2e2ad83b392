"""A parsed filter compiled to closures: parse once, evaluate per message with no tree walk.

Every condition evaluates to True, False or None (unknown: a missing property), with RocketMQ's
three-valued ``AND``/``OR``/``NOT``, short-circuiting left to right as its ``LogicExpression``
does (so ``a = 'x' OR n > 5`` matches a message with ``a = 'x'`` whatever ``n`` holds). A
message matches only when the filter is True; a value that does not convert
(:class:`~storage.sql92.java_values.Unconvertible`) makes it not match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from storage.sql92.java_values import Unconvertible, compare, java_double
from storage.sql92.syntax import (
    Compare,
    Condition,
    Constant,
    In,
    IsNull,
    Literal,
    Logic,
    Not,
    TextMatch,
    Value,
)

Properties = Mapping[str, str]
Test = Callable[[Properties], bool | None]
Reader = Callable[[Properties], Constant | None]

_ANSWERS: Final[dict[str, Callable[[int], bool]]] = {
    "=": lambda c: c == 0,
    "<>": lambda c: c != 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
}


def compiled(condition: Condition) -> Test:
    """``condition`` as a function of a message's properties."""
    if isinstance(condition, Compare):
        return _comparison(condition)
    if isinstance(condition, Logic):
        return _logic(condition)
    if isinstance(condition, Not):
        return _negation(compiled(condition.operand))
    if isinstance(condition, In):
        return _membership(condition)
    if isinstance(condition, TextMatch):
        return _text_match(condition)
    if isinstance(condition, IsNull):
        return _null_test(condition)
    assert isinstance(condition, Literal)
    value = condition.value
    return lambda properties: value


def matches(test: Test, properties: Properties) -> bool:
    """Whether a message with ``properties`` passes: True exactly, not unknown, no error."""
    try:
        return test(properties) is True
    except Unconvertible:
        return False


def _reader(value: Value) -> Reader:
    name = value.name
    if name is not None:
        return lambda properties: properties.get(name)
    constant = value.value
    return lambda properties: constant


def _comparison(condition: Compare) -> Test:
    op, left, right = condition.op, condition.left, condition.right
    if op in ("=", "<>"):
        equal = _equality(left, right)
        return equal if op == "=" else _negation(equal)
    answer = _ANSWERS[op]
    if left.is_property and right.is_property:
        return _property_order(str(left.name), str(right.name), answer)
    read_left, read_right = _reader(left), _reader(right)

    def ordered(properties: Properties) -> bool | None:
        lv = read_left(properties)
        if lv is None:
            return None
        rv = read_right(properties)
        if rv is None:
            return None
        return answer(compare(lv, rv))

    return ordered


def _equality(left: Value, right: Value) -> Test:
    """RocketMQ's ``=``: one side missing is unknown (the left) or false (the right), both
    missing true; equal values true; otherwise compared after conversion."""
    if left.is_property and not right.is_property and isinstance(right.value, str):
        name, text = str(left.name), right.value  # the usual `a = 'x'`: a string compare

        def text_equal(properties: Properties) -> bool | None:
            value = properties.get(name)
            return None if value is None else value == text

        return text_equal
    read_left, read_right = _reader(left), _reader(right)

    def equal(properties: Properties) -> bool | None:
        lv = read_left(properties)
        rv = read_right(properties)
        if lv is None or rv is None:
            return None if lv is None and rv is not None else lv is None and rv is None
        if type(lv) is type(rv) and lv == rv:
            return True
        return compare(lv, rv) == 0

    return equal


def _property_order(left: str, right: str, answer: Callable[[int], bool]) -> Test:
    """Two properties ordered: both read as doubles (RocketMQ orders no strings)."""

    def ordered(properties: Properties) -> bool | None:
        lv = properties.get(left)
        if lv is None:
            return None
        rv = properties.get(right)
        if rv is None:
            return None
        return answer(compare(java_double(lv), java_double(rv)))

    return ordered


def _logic(condition: Logic) -> Test:
    tests = tuple(compiled(operand) for operand in condition.operands)
    # AND stops at the first False, OR at the first True; an unknown on the way makes the
    # result unknown if nothing decides it.
    decisive = condition.op == "OR"

    def combined(properties: Properties) -> bool | None:
        unknown = False
        for test in tests:
            result = test(properties)
            if result is None:
                unknown = True
            elif result is decisive:
                return decisive
        return None if unknown else not decisive

    return combined


def _negation(test: Test) -> Test:
    def negated(properties: Properties) -> bool | None:
        result = test(properties)
        return None if result is None else not result

    return negated


def _membership(condition: In) -> Test:
    name, values, negated = condition.name, condition.values, condition.negated

    def within(properties: Properties) -> bool | None:
        value = properties.get(name)
        return None if value is None else (value in values) != negated

    return within


def _text_match(condition: TextMatch) -> Test:
    """CONTAINS, STARTSWITH, ENDSWITH: false for a missing property or an empty search, with
    or without NOT (RocketMQ's rule)."""
    name, search, negated = condition.name, condition.search, condition.negated
    if not search:
        return lambda properties: False
    check: Callable[[str], bool] = {
        "CONTAINS": lambda value: search in value,
        "STARTSWITH": lambda value: value.startswith(search),
        "ENDSWITH": lambda value: value.endswith(search),
    }[condition.kind]

    def text_matches(properties: Properties) -> bool:
        value = properties.get(name)
        return False if value is None else check(value) != negated

    return text_matches


def _null_test(condition: IsNull) -> Test:
    operand = condition.operand
    if isinstance(operand, Value):
        read = _reader(operand)
        is_null: Test = lambda properties: read(properties) is None  # noqa: E731
    else:
        test = compiled(operand)
        is_null = lambda properties: test(properties) is None  # noqa: E731
    return _negation(is_null) if condition.negated else is_null
