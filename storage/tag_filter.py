"""TagFilter: a consumer's tag subscription, compared by Java hash code (reference §10.5).

``*`` (or nothing) subscribes to everything; ``A||B`` to the listed tags.
"""

from __future__ import annotations

from typing import Final

from storage.codec import tags_code, to_int32

SUB_ALL: Final = "*"


class TagFilter:
    """A tag subscription: everything, or a set of tags (``A||B``) and their hash codes."""

    __slots__ = ("codes", "expression", "tags")

    def __init__(self, expression: str | None) -> None:
        self.expression = (expression or SUB_ALL).strip() or SUB_ALL
        if self.expression == SUB_ALL:
            self.tags: frozenset[str] | None = None
            self.codes: frozenset[int] | None = None
            return
        tags = frozenset(t.strip() for t in self.expression.split("||") if t.strip())
        self.tags = tags or None
        self.codes = frozenset(tags_code(t) for t in tags) if tags else None

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
