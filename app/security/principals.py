"""Who is calling and what they may do: a :class:`Principal` and its grants.

A principal is a token of the auth file (or a browser session opened with one), or
:data:`ANONYMOUS` when the server runs without an auth file. Grants are fnmatch-style
patterns (``*``, ``?``, ``[ab]``), matched case-sensitively against whole names:

* ``admin`` — everything;
* ``produce`` — topic patterns a token may send to;
* ``consume`` — (group pattern, topic pattern) pairs a token may consume with.

A group's own retry and dead-letter topics (``%RETRY%<group>``, ``%DLQ%<group>``) belong to
the group: a token that may consume with the group may read them. System topics
(``SCHEDULE_TOPIC_XXXX``, which holds every topic's delayed messages) are admin-only: no
pattern covers them.

>>> p = Principal("billing", consume=(ConsumeGrant.parse("billing-*:Orders*"),))
>>> p.may_consume("billing-eu", "OrdersPaid"), p.may_consume("billing-eu", "Refunds")
(True, False)
>>> p.may_consume(None, "%RETRY%billing-eu")
True
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from typing import Final

from services import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, SYSTEM_TOPICS

_OWNED_PREFIXES: Final = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)


@dataclass(frozen=True, slots=True)
class Pattern:
    """An fnmatch-style pattern, compiled once."""

    text: str
    regex: re.Pattern[str] = field(compare=False, repr=False)

    @classmethod
    def of(cls, text: str) -> Pattern:
        return cls(text, re.compile(fnmatch.translate(text)))

    def matches(self, name: str) -> bool:
        return self.regex.match(name) is not None


@dataclass(frozen=True, slots=True)
class ConsumeGrant:
    """May consume topics matching ``topic`` with groups matching ``group``."""

    group: Pattern
    topic: Pattern

    @classmethod
    def parse(cls, text: str) -> ConsumeGrant:
        """``GROUP:TOPIC`` (group names cannot hold ``:``); ValueError when malformed."""
        group, sep, topic = text.partition(":")
        if not sep or not group or not topic:
            raise ValueError(f"a consume grant is GROUP:TOPIC, not {text!r}")
        return cls(Pattern.of(group), Pattern.of(topic))

    def __str__(self) -> str:
        return f"{self.group.text}:{self.topic.text}"


@dataclass(frozen=True, slots=True)
class Principal:
    """A caller: its name (for logs and the audit log), grants and quota overrides."""

    name: str
    admin: bool = False
    produce: tuple[Pattern, ...] = ()
    consume: tuple[ConsumeGrant, ...] = ()
    producer_groups: tuple[Pattern, ...] = ()  # groups it may send transactions as
    rate_per_s: float | None = None  # None: the server's default
    burst: int | None = None
    max_parked_pulls: int | None = None
    anonymous: bool = False

    def may_produce(self, topic: str) -> bool:
        if self.admin:
            return True
        return topic not in SYSTEM_TOPICS and any(p.matches(topic) for p in self.produce)

    def may_produce_as(self, producer_group: str) -> bool:
        """May send, end and be asked about transactions as ``producer_group``."""
        return self.admin or any(p.matches(producer_group) for p in self.producer_groups)

    def may_consume(self, group: str | None, topic: str | None) -> bool:
        """Whether some grant covers ``group`` and ``topic``; None stands for "any"."""
        if self.admin:
            return True
        if topic in SYSTEM_TOPICS:
            return False
        for grant in self.consume:
            if (group is None or grant.group.matches(group)) and (
                topic is None or grant.topic.matches(topic)
            ):
                return True
        owner = owning_group(topic)
        return owner is not None and group in (None, owner) and self.may_consume(owner, None)

    def may_see_topic(self, topic: str) -> bool:
        """May produce to it or consume it with some group."""
        return self.may_produce(topic) or self.may_consume(None, topic)


def owning_group(topic: str | None) -> str | None:
    """The group of a ``%RETRY%<group>`` or ``%DLQ%<group>`` topic, else None."""
    if topic is None:
        return None
    for prefix in _OWNED_PREFIXES:
        if topic.startswith(prefix) and len(topic) > len(prefix):
            return topic[len(prefix) :]
    return None


ANONYMOUS: Final = Principal("anonymous", admin=True, anonymous=True)
"""Every caller when the server runs without an auth file (loopback, or --allow-anonymous)."""
