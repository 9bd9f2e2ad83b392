"""SQL92 property filters: RocketMQ's selector grammar, parsed once and compiled to closures.

    >>> f = Sql92Filter("region = 'eu' AND amount > 100")
    >>> f.matches({"region": "eu", "amount": "250"}), f.matches({"region": "eu"})
    (True, False)

The grammar and its refusals: :mod:`storage.sql92.syntax`; how a property's string is
compared with a number or a boolean: :mod:`storage.sql92.java_values`; three-valued
evaluation: :mod:`storage.sql92.evaluate`.
"""

from __future__ import annotations

from storage.sql92.evaluate import Properties, compiled, matches
from storage.sql92.lexer import FilterSyntaxError
from storage.sql92.syntax import MAX_EXPRESSION_CHARS, MAX_NESTING, parse

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_NESTING",
    "FilterSyntaxError",
    "Sql92Filter",
]


class Sql92Filter:
    """A compiled filter expression (FilterSyntaxError if ``expression`` is not one)."""

    __slots__ = ("expression", "test")

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.test = compiled(parse(expression))

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"

    def matches(self, properties: Properties) -> bool:
        """Whether a message with these properties passes the filter."""
        return matches(self.test, properties)
