"""Topic names: the allowed characters and the topics the broker derives from a group's name.

RocketMQ's ``TopicValidator`` allows ``[%|a-zA-Z0-9_-]`` and at most 127 characters (the v1
record stores the length in one byte); consumer group names use the same characters.
``MixAll`` names each group's retry topic ``%RETRY%<group>`` and its dead-letter topic
``%DLQ%<group>`` (reference §9). Match names with ``fullmatch``: ``$`` also matches before a
trailing newline.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

from storage.errors import InvalidTopicError

TOPIC_NAME_PATTERN: Final = r"^[%|a-zA-Z0-9_-]+$"
"""The allowed characters, anchored: the same text the OpenAPI document shows."""

TOPIC_PATTERN: Final = re.compile(TOPIC_NAME_PATTERN)
MAX_TOPIC_LENGTH: Final = 127

RETRY_GROUP_TOPIC_PREFIX: Final = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX: Final = "%DLQ%"
GROUP_TOPIC_PREFIXES: Final = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)

# Transactional messages (``TopicValidator``): half messages wait in the half topic, op
# records mark them ended, and halves checked too often are copied to the check-max topic.
TRANS_HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"
TRANSACTION_TOPICS: Final = frozenset(
    {TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC}
)
"""Topics of the broker's transaction bookkeeping: never user messages."""

REVIVE_TOPIC: Final = "rmq_sys_REVIVE_LOG"
"""POP's bookkeeping (RocketMQ 5): the CK and ACK records of receives and acks."""

TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
"""Message trace (RocketMQ's name): the broker's record of each step in a message's life."""


def is_valid_name(name: str, max_length: int = MAX_TOPIC_LENGTH) -> bool:
    """Whether ``name`` is 1 to ``max_length`` allowed characters (topics and groups)."""
    return 0 < len(name) <= max_length and TOPIC_PATTERN.fullmatch(name) is not None


@lru_cache(maxsize=4096)
def check_topic(topic: str) -> str:
    """The topic name itself; ``InvalidTopicError`` when it is not valid (errors not cached)."""
    if not is_valid_name(topic):
        raise InvalidTopicError(
            f"invalid topic name {topic[:140]!r}: use 1 to {MAX_TOPIC_LENGTH} characters "
            "from a-z A-Z 0-9 _ - % |"
        )
    return topic


def retry_topic(group: str) -> str:
    """The topic a group's failed messages come back through."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """The topic a group's messages land in after too many retries."""
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def is_group_topic(topic: str) -> bool:
    """A retry or dead-letter topic: the broker writes these itself."""
    return topic.startswith(GROUP_TOPIC_PREFIXES)
