"""The tokens of a SQL92 filter, as RocketMQ's selector grammar (``SelectorParser.jj``) reads
them: keywords and identifiers matched case-insensitively, ``'...'`` strings with ``''`` for a
quote, decimal integers (an optional ``L``), floating-point numbers, the comparison operators,
parentheses and commas; ``-- ...`` and ``/* ... */`` comments and whitespace skipped.

Each token keeps its offset in the expression, so an error can say where it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

KEYWORDS: Final = frozenset(
    (
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "TRUE",
        "FALSE",
        "NULL",
        "IS",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    )
)
"""RocketMQ 5's keywords; there is no LIKE, ESCAPE or arithmetic."""


class FilterSyntaxError(ValueError):
    """An expression that is not a filter: where (``position``, an offset in the text), what
    was expected there, and what was found."""

    def __init__(self, position: int, expected: str, found: str) -> None:
        super().__init__(f"at position {position}: expected {expected}, found {found}")
        self.position = position
        self.expected = expected
        self.found = found


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its kind (``"ID"``, ``"STRING"``, ``"INTEGER"``, ``"FLOAT"``, ``"END"``, a
    keyword, or the operator itself), its value, and where it starts."""

    kind: str
    value: str | int | float
    position: int

    def shown(self) -> str:
        """The token as an error message names it."""
        if self.kind == "END":
            return "the end of the expression"
        if self.kind == "STRING":
            return "'" + str(self.value).replace("'", "''") + "'"
        return repr(str(self.value)) if self.kind in ("ID", "INTEGER", "FLOAT") else self.kind


_SKIPPED: Final = re.compile(r"(?:[ \t\n\r\f]+|--[^\n\r]*|/\*.*?\*/)+", re.DOTALL)
_FLOAT: Final = re.compile(r"(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")
_INTEGER: Final = re.compile(r"(?:[1-9][0-9]*|0)[lL]?")
_IDENTIFIER: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_STRING: Final = re.compile(r"'(?:[^']|'')*'")
_OPERATORS: Final = ("<>", ">=", "<=", "=", ">", "<", "(", ")", ",", "+", "-")


def tokens(text: str) -> list[Token]:
    """The expression's tokens, ending with an ``END`` token; FilterSyntaxError at the first
    character that starts none."""
    found: list[Token] = []
    at = 0
    while True:
        skipped = _SKIPPED.match(text, at)
        if skipped is not None:
            at = skipped.end()
        if at >= len(text):
            found.append(Token("END", "", at))
            return found
        token, at = _token_at(text, at)
        found.append(token)


def _token_at(text: str, at: int) -> tuple[Token, int]:
    """The token that starts at ``at``, and where the text after it starts."""
    char = text[at]
    if char == "'":
        quoted = _STRING.match(text, at)
        if quoted is None:
            raise FilterSyntaxError(at, "a closing quote (') for this string", "none")
        return Token("STRING", quoted.group()[1:-1].replace("''", "'"), at), quoted.end()
    number = _FLOAT.match(text, at)
    if number is not None:  # the longer reading first: "5." and "5E3" are floats
        return Token("FLOAT", float(number.group()), at), number.end()
    number = _INTEGER.match(text, at)
    if number is not None:
        return Token("INTEGER", int(number.group().rstrip("lL")), at), number.end()
    name = _IDENTIFIER.match(text, at)
    if name is not None:
        word = name.group()
        upper = word.upper()
        token = Token(upper, upper, at) if upper in KEYWORDS else Token("ID", word, at)
        return token, name.end()
    for operator in _OPERATORS:
        if text.startswith(operator, at):
            return Token(operator, operator, at), at + len(operator)
    if text.startswith("!=", at):
        raise FilterSyntaxError(at, "<> (SQL's not-equal; there is no !=)", "'!='")
    if char == '"':
        raise FilterSyntaxError(at, "a string in single quotes", "a double quote")
    raise FilterSyntaxError(at, "a property, a constant, an operator or a parenthesis", repr(char))
