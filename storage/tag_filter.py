"""TagFilter: a consumer's tag subscription, compared by Java hash code (reference §10.5).

``None``, ``""`` and ``"*"`` subscribe to everything. Anything else is split on ``||``; each
piece is trimmed and empty pieces are dropped, so an expression with no tag left (``"||"``,
``" "``) matches nothing, as in RocketMQ's ``FilterAPI.buildSubscriptionData``.
"""

from __future__ import annotations

from typing import Final

from storage.record.java_hash import tags_code, to_int32

SUB_ALL: Final = "*"
TAG_SEPARATOR: Final = "||"


def subscribed_tags(expression: str | None) -> frozenset[str] | None:
    """The tags an expression subscribes to; None for every message (tagged or not).

    The one reading of a tag expression: the store's pull filter and Spark replay use it.
    """
    if expression is None or expression in ("", SUB_ALL):
        return None
    return frozenset(piece.strip() for piece in expression.split(TAG_SEPARATOR) if piece.strip())


class TagFilter:
    """A tag subscription: everything, or a set of tags (``A||B``) and their hash codes."""

    __slots__ = ("codes", "expression", "tags")

    def __init__(self, expression: str | None) -> None:
        self.tags = subscribed_tags(expression)
        self.expression = SUB_ALL if self.tags is None else str(expression)
        self.codes = None if self.tags is None else frozenset(tags_code(t) for t in self.tags)

    def __repr__(self) -> str:
        return f"TagFilter({self.expression!r})"

    @property
    def matches_all(self) -> bool:
        return self.codes is None

    def matches_code(self, code: int) -> bool:
        """The broker's check: the low 32 bits of a ConsumeQueue unit's tags code."""
        return self.codes is None or to_int32(code) in self.codes

    def matches_tags(self, tags: str | None) -> bool:
        """The exact re-check that removes hash collisions."""
        return self.tags is None or (tags is not None and tags in self.tags)
