"""The syntax tree of a SQL92 filter, and the parser that builds it from tokens.

Written by hand rather than with a parser library: the grammar is RocketMQ's selector grammar,
six levels of precedence, and what a user needs from it is an exact error — the offset, what
was expected, what was found — which a recursive-descent parser gives directly; it also keeps
the store (and Spark's executors, which read filters from store files) free of one more
dependency.

Precedence, lowest first, as RocketMQ's: ``OR``; ``AND``; ``=``, ``<>``, ``IS [NOT] NULL``;
``<``, ``<=``, ``>``, ``>=``, ``[NOT] BETWEEN``, ``[NOT] IN``, ``[NOT] CONTAINS``,
``[NOT] STARTSWITH``, ``[NOT] ENDSWITH``; unary ``NOT``, ``-``, ``+``; a parenthesised
expression, a constant or a property.

Where RocketMQ's parser accepts what can only mislead, this one refuses it, naming the place:

* tokens after a complete expression (RocketMQ ignores them: ``a = 'x' b = 'y'`` is
  ``a = 'x'``, and ``a LIKE 'x%'`` a bare ``a``);
* a property, string or number where a condition belongs (RocketMQ's cast makes it false);
* ``NOT`` before a property (``NOT a = 'x'`` is ``(NOT a) = 'x'`` in RocketMQ's precedence):
  ``NOT (a = 'x')`` or ``a <> 'x'`` say what is meant;
* a minus before a property (RocketMQ makes it null).

RocketMQ's own refusals stay: ``NULL`` compared with ``=`` (use ``IS NULL``), strings and
booleans ordered with ``<`` and the like, ``BETWEEN`` bounds in the wrong order, ``IN`` on
anything but a property or with anything but strings; its refusal of ``0.0`` (a bug) does not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, NoReturn

from storage.sql92.lexer import FilterSyntaxError, Token, tokens

MAX_EXPRESSION_CHARS: Final = 4096
MAX_NESTING: Final = 32
"""How deep parentheses and unary operators may nest."""

LONG_MIN: Final = -(2**63)
LONG_MAX: Final = 2**63 - 1

Constant = str | int | float | bool


@dataclass(frozen=True, slots=True)
class Value:
    """A constant (``value``) or a property (``name``); neither: the ``NULL`` constant."""

    position: int
    name: str | None = None
    value: Constant | None = None

    @property
    def is_property(self) -> bool:
        return self.name is not None


@dataclass(frozen=True, slots=True)
class Compare:
    """``left op right``; ``op`` one of ``=``, ``<>``, ``<``, ``<=``, ``>``, ``>=``."""

    op: str
    left: Value
    right: Value


@dataclass(frozen=True, slots=True)
class IsNull:
    operand: Value | Condition
    negated: bool


@dataclass(frozen=True, slots=True)
class In:
    name: str
    values: frozenset[str]
    negated: bool


@dataclass(frozen=True, slots=True)
class TextMatch:
    """``name [NOT] CONTAINS|STARTSWITH|ENDSWITH 'search'``."""

    kind: str
    name: str
    search: str
    negated: bool


@dataclass(frozen=True, slots=True)
class Logic:
    """``AND`` or ``OR`` over two or more conditions, evaluated left to right."""

    op: str
    operands: tuple[Condition, ...]


@dataclass(frozen=True, slots=True)
class Not:
    operand: Condition


@dataclass(frozen=True, slots=True)
class Literal:
    """``TRUE`` or ``FALSE`` where a condition belongs."""

    value: bool


Condition = Compare | IsNull | In | TextMatch | Logic | Not | Literal
Operand = Value | Condition

_ORDERING: Final = frozenset(("<", "<=", ">", ">="))
_TEXT_MATCHES: Final = frozenset(("CONTAINS", "STARTSWITH", "ENDSWITH"))


def parse(text: str) -> Condition:
    """The condition ``text`` says; FilterSyntaxError where it says something else."""
    if len(text) > MAX_EXPRESSION_CHARS:
        raise FilterSyntaxError(
            MAX_EXPRESSION_CHARS, f"at most {MAX_EXPRESSION_CHARS} characters", f"{len(text)}"
        )
    return _Parser(tokens(text)).whole()


class _Parser:
    def __init__(self, found: list[Token]) -> None:
        self.tokens = found
        self.at = 0
        self.depth = 0

    # ------------------------------------------------------------------ tokens

    @property
    def next(self) -> Token:
        return self.tokens[self.at]

    def take(self, *kinds: str) -> Token | None:
        """The next token if it is one of ``kinds`` (then passed), else None."""
        token = self.tokens[self.at]
        if token.kind in kinds:
            self.at += 1
            return token
        return None

    def expect(self, kind: str, expected: str) -> Token:
        token = self.take(kind)
        if token is None:
            raise self.error(expected)
        return token

    def error(self, expected: str, token: Token | None = None) -> FilterSyntaxError:
        token = token or self.next
        return FilterSyntaxError(token.position, expected, token.shown())

    # ------------------------------------------------------------------ grammar

    def whole(self) -> Condition:
        start = self.next
        operand = self.disjunction()
        if self.next.kind != "END":
            raise self.error(_what_may_follow(operand, self.next))
        return self.condition(operand, start)

    def disjunction(self) -> Operand:
        start = self.next
        first = self.conjunction()
        if self.next.kind != "OR":
            return first
        operands = [self.condition(first, start)]
        while self.take("OR"):
            start = self.next
            operands.append(self.condition(self.conjunction(), start))
        return Logic("OR", tuple(operands))

    def conjunction(self) -> Operand:
        start = self.next
        first = self.equality()
        if self.next.kind != "AND":
            return first
        operands = [self.condition(first, start)]
        while self.take("AND"):
            start = self.next
            operands.append(self.condition(self.equality(), start))
        return Logic("AND", tuple(operands))

    def equality(self) -> Operand:
        left = self.comparison()
        while True:
            operator = self.take("=", "<>")
            if operator is not None:
                left = self.compared(operator.kind, operator, left, self.comparison())
            elif self.take("IS"):
                negated = self.take("NOT") is not None
                self.expect("NULL", "NULL after IS" + (" NOT" if negated else ""))
                if isinstance(left, Value) and not left.is_property:
                    raise FilterSyntaxError(
                        left.position, "a property or a condition before IS NULL", "a constant"
                    )
                left = IsNull(left, negated)
            else:
                return left

    def comparison(self) -> Operand:
        left = self.unary()
        while True:
            operator = self.take("<", "<=", ">", ">=")
            if operator is not None:
                left = self.compared(operator.kind, operator, left, self.unary())
                continue
            negated = self.take("NOT") is not None
            token = self.take("BETWEEN", "IN", *_TEXT_MATCHES)
            if token is None and negated:
                raise self.error("BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT")
            if token is None:
                return left
            if token.kind == "BETWEEN":
                left = self.between(token, left, negated)
            elif token.kind == "IN":
                left = self.within(left, negated)
            else:
                left = self.text_match(token.kind, left, negated)

    def unary(self) -> Operand:
        token = self.take("NOT", "-", "+")
        if token is None:
            return self.primary()
        self.enter(token)
        operand = self.unary()
        self.depth -= 1
        if token.kind == "NOT":
            if isinstance(operand, Value) and operand.is_property:
                raise FilterSyntaxError(
                    token.position,
                    f"a condition after NOT (NOT applies to {operand.name} alone here: "
                    f"write NOT ({operand.name} ...) or use <>)",
                    f"the property {operand.name}",
                )
            return Not(self.condition(operand, token))
        number = _number_of(operand, token, f"a number after {token.kind}")
        return Value(token.position, value=-number if token.kind == "-" else number)

    def primary(self) -> Operand:
        token = self.next
        self.at += 1
        kind = token.kind
        if kind == "(":
            self.enter(token)
            inner = self.disjunction()
            self.depth -= 1
            self.expect(")", "a closing parenthesis")
            return inner
        if kind == "ID":
            return Value(token.position, name=str(token.value))
        if kind in ("STRING", "INTEGER", "FLOAT"):
            return Value(token.position, value=token.value)
        if kind in ("TRUE", "FALSE"):
            return Value(token.position, value=kind == "TRUE")
        if kind == "NULL":
            return Value(token.position)
        raise self.error("a property, a constant or a parenthesis", token)

    def enter(self, token: Token) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise FilterSyntaxError(token.position, f"at most {MAX_NESTING} nested levels", "more")

    # ------------------------------------------------------------------ building, checked

    def condition(self, operand: Operand, start: Token) -> Condition:
        """``operand`` where a condition belongs: a condition, ``TRUE`` or ``FALSE``."""
        if not isinstance(operand, Value):
            return operand
        if isinstance(operand.value, bool):
            return Literal(operand.value)
        what = (
            f"the property {operand.name} alone (compare it: {operand.name} = '...')"
            if operand.is_property
            else "NULL"
            if operand.value is None
            else "a constant"
        )
        return _raise(FilterSyntaxError(start.position, "a condition", what))

    def compared(self, op: str, where: Token, left: Operand, right: Operand) -> Compare:
        """``left op right``, each side a property or a constant of a type ``op`` compares."""
        for side in (left, right):
            if not isinstance(side, Value):
                raise self.error(f"a property or a constant on each side of {op}", where)
            if side.is_property:
                continue
            if side.value is None:
                raise FilterSyntaxError(side.position, f"IS NULL rather than {op} NULL", "NULL")
            if op in _ORDERING:
                _number_of(side, where, f"a number or a property on each side of {op}")
            _check_range(side)
        assert isinstance(left, Value) and isinstance(right, Value)
        if (
            not left.is_property
            and not right.is_property
            and isinstance(left.value, bool) != isinstance(right.value, bool)
        ):
            raise FilterSyntaxError(left.position, "constants of one type", "TRUE or FALSE")
        return Compare(op, left, right)

    def between(self, where: Token, operand: Operand, negated: bool) -> Condition:
        """``BETWEEN low AND high`` as RocketMQ rewrites it: ``>= low AND <= high`` (negated:
        ``< low OR > high``), each comparison checked as one."""
        low = self.unary()
        self.expect("AND", "AND between the bounds of BETWEEN")
        high = self.unary()
        for bound in (low, high):
            if isinstance(bound, Value) and not bound.is_property:
                _number_of(bound, where, "a number as a bound of BETWEEN")
        low_number, high_number = _constant_number(low), _constant_number(high)
        if low_number is not None and high_number is not None and low_number > high_number:
            raise FilterSyntaxError(
                where.position, "a low bound at most the high one", "the bounds reversed"
            )
        if negated:
            below = self.compared("<", where, operand, low)
            return Logic("OR", (below, self.compared(">", where, operand, high)))
        above = self.compared(">=", where, operand, low)
        return Logic("AND", (above, self.compared("<=", where, operand, high)))

    def within(self, operand: Operand, negated: bool) -> In:
        name = self.property_name(operand, "IN")
        self.expect("(", "a parenthesis opening the list of IN")
        values = [str(self.expect("STRING", "a string in the list of IN").value)]
        while self.take(","):
            values.append(str(self.expect("STRING", "a string in the list of IN").value))
        self.expect(")", "a comma or a closing parenthesis in the list of IN")
        return In(name, frozenset(values), negated)

    def text_match(self, kind: str, operand: Operand, negated: bool) -> TextMatch:
        name = self.property_name(operand, kind)
        search = self.expect("STRING", f"a string after {kind}")
        return TextMatch(kind, name, str(search.value), negated)

    def property_name(self, operand: Operand, operator: str) -> str:
        if isinstance(operand, Value) and operand.name is not None:
            return operand.name
        position = operand.position if isinstance(operand, Value) else self.next.position
        raise FilterSyntaxError(position, f"a property before {operator}", "something else")


def _number_of(operand: Operand, where: Token, expected: str) -> int | float:
    if isinstance(operand, Value) and not operand.is_property:
        value = operand.value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return _raise(FilterSyntaxError(where.position, expected, _described(operand)))


def _what_may_follow(operand: Operand, token: Token) -> str:
    if not isinstance(operand, Value):
        return "AND, OR or the end of the expression"
    if token.kind == "ID" and str(token.value).upper() == "LIKE":
        return "a comparison (there is no LIKE: CONTAINS, STARTSWITH or ENDSWITH)"
    return "a comparison: =, <>, <, <=, >, >=, IS, BETWEEN, IN, CONTAINS, STARTSWITH, ENDSWITH"


def _constant_number(operand: Operand) -> int | float | None:
    if isinstance(operand, Value) and isinstance(operand.value, int | float):
        return None if isinstance(operand.value, bool) else operand.value
    return None


def _check_range(value: Value) -> None:
    """Integers are 64-bit (Java's long), floating-point numbers finite."""
    number = _constant_number(value)
    if isinstance(number, int) and not LONG_MIN <= number <= LONG_MAX:
        raise FilterSyntaxError(value.position, "an integer within 64 bits", f"{number}")
    if isinstance(number, float) and not math.isfinite(number):
        raise FilterSyntaxError(value.position, "a finite number", "one out of range")


def _described(operand: Operand) -> str:
    if not isinstance(operand, Value):
        return "a condition"
    if operand.is_property:
        return f"the property {operand.name}"
    if operand.value is None:
        return "NULL"
    return "a string" if isinstance(operand.value, str) else "TRUE or FALSE"


def _raise(error: FilterSyntaxError) -> NoReturn:
    raise error
