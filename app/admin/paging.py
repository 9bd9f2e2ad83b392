"""Pages of the admin lists: at most :data:`PAGE_SIZE` rows, the next page after the last
name shown, and how many there are in all (only the page's rows are computed)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlencode

PAGE_SIZE: Final = 100


@dataclass(frozen=True, slots=True)
class Pager:
    """One page of a sorted list of names, and the links around it."""

    names: list[str]
    total: int
    first: int  # 1-based position of the page's first name
    next_after: str | None
    query: dict[str, str]  # the list's other query parameters (search, filters)

    @property
    def next_query(self) -> str:
        """The query string of the next page ('' when this is the last)."""
        if self.next_after is None:
            return ""
        return urlencode({**self.query, "after": self.next_after})

    @property
    def first_query(self) -> str:
        """The query string of the first page ('' when this is the first)."""
        if self.first <= 1:
            return ""
        return urlencode(self.query) or "after="

    @property
    def last(self) -> int:
        return self.first + len(self.names) - 1


def page_of(
    names: Sequence[str], after: str, query: dict[str, str], size: int = PAGE_SIZE
) -> Pager:
    """The names (sorted) after ``after`` ('' for the first page), at most ``size``."""
    start = bisect.bisect_right(names, after) if after else 0
    page = list(names[start : start + size])
    more = start + size < len(names)
    return Pager(page, len(names), start + 1, page[-1] if page and more else None, query)
