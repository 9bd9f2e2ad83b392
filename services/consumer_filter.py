"""What a consumer asks to receive of a topic: RocketMQ's subscription — a tag expression, and
optionally a SQL92 filter on the messages' properties.

The store applies both in a read (:meth:`storage.MessageStore.get_message`): the tag by its hash
code in the ConsumeQueue, the SQL92 filter on each record's properties (RocketMQ's
``isMatchedByConsumeQueue`` and ``isMatchedByCommitLog``); what fails either is skipped and
counted in the next offset. Retried messages are delivered whatever their tag (RocketMQ's
``filterSupportRetry=false``) but pass the SQL92 filter like any other: a retry carries the
original message's properties.

A group may store a SQL92 filter per topic (its subscription: ``filters`` in its config), which
its pulls and receives of that topic apply when they name none of their own.

A filter is compiled once per expression text (a small cache: consumers pull in loops with the
same filter).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from services.errors import InvalidFilterError
from storage import TagFilter
from storage.config_managers import SubscriptionGroupConfig
from storage.record.properties import PROPERTY_TAGS
from storage.sql92 import MAX_EXPRESSION_CHARS, FilterSyntaxError, Sql92Filter

MAX_FILTER_CHARS: Final = MAX_EXPRESSION_CHARS
"""The longest filter text."""

_EVERY_TAG: Final = TagFilter(None)


@functools.lru_cache(maxsize=256)
def compiled_filter(expression: str) -> Sql92Filter:
    """``expression`` compiled; InvalidFilterError (INVALID_FILTER) where it does not parse."""
    try:
        return Sql92Filter(expression)
    except FilterSyntaxError as exc:
        raise InvalidFilterError(f"the filter does not parse: {exc}") from None


@dataclass(frozen=True, slots=True)
class ConsumerFilter:
    """A tag subscription and an optional SQL92 filter."""

    tags: TagFilter
    sql: Sql92Filter | None = None

    @classmethod
    def of(cls, tags: str | None, sql: str | None = None) -> ConsumerFilter:
        """From a request's ``tags`` expression and SQL92 ``filter`` (either may be None)."""
        return cls(TagFilter(tags), None if sql is None else compiled_filter(sql))

    def or_stored(self, group: SubscriptionGroupConfig, topic: str) -> ConsumerFilter:
        """This filter, or — when it has no SQL92 part — the one ``group`` stores for
        ``topic`` (a group's subscription), if any."""
        stored = group.filters.get(topic)
        if self.sql is not None or stored is None:
            return self
        return ConsumerFilter(self.tags, compiled_filter(stored))

    @property
    def store_tags(self) -> TagFilter | None:
        """The tag filter a store read applies (None: every tag)."""
        return None if self.tags.matches_all else self.tags

    @property
    def property_test(self) -> Callable[[Mapping[str, str]], bool] | None:
        """The test of a record's properties a store read applies (None: no SQL92 filter)."""
        return None if self.sql is None else self.sql.matches

    @property
    def record_test(self) -> Callable[[Mapping[str, str]], bool] | None:
        """The test of a record's properties for a read that hands records out undecoded (a
        pull drops tag hash collisions from its views instead): the exact tag after the
        store's check by hash code, then the SQL92 filter."""
        sql, keeps_tags = self.property_test, self.keeps_tags
        if self.store_tags is None:
            return sql
        if sql is None:
            return lambda properties: keeps_tags(properties.get(PROPERTY_TAGS))
        return lambda properties: keeps_tags(properties.get(PROPERTY_TAGS)) and sql(properties)

    def keeps_tags(self, tags: str | None) -> bool:
        """The exact tag re-check after the store's check by hash code (drops collisions)."""
        return self.tags.matches_tags(tags)

    def for_retries(self) -> ConsumerFilter:
        """This filter as it applies to the group's retry topic: every tag, the same SQL92."""
        return self if self.tags.matches_all else ConsumerFilter(_EVERY_TAG, self.sql)
