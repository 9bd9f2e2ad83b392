"""Tag expressions of a replay, read as RocketMQ reads a subscription's (``FilterAPI.build``).

``None``, ``""`` and ``*`` subscribe to everything. Anything else is split at ``||``; each
tag is trimmed and empty ones are dropped. An expression that leaves no tag (``"||"``,
``" "``, ``" || "``) subscribes to nothing: RocketMQ builds an empty tag set and its filter
then matches no message. The store's pull filter follows the same rule.
"""

from __future__ import annotations

from typing import Final

SUB_ALL: Final = "*"
TAG_SEPARATOR: Final = "||"


def parse_tag_expression(expression: str | None) -> frozenset[str] | None:
    """The tags an expression selects; None for every message (tagged or not)."""
    if expression is None or expression == "" or expression.strip() == SUB_ALL:
        return None
    return frozenset(tag.strip() for tag in expression.split(TAG_SEPARATOR) if tag.strip())
