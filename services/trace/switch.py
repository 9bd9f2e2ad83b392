"""Which messages are traced: per topic (``trace`` in its config), a broker default, and a
sampling rate.

A topic's ``trace`` (true or false) wins over the broker default. Sampling picks messages by
a hash of their id, so every step of a message is traced or none is, on every broker.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Final

from storage.config_managers import TopicConfig
from storage.topic_names import is_group_topic

_HASH_SPACE: Final = 1 << 32

TopicLookup = Callable[[str], TopicConfig | None]
"""A topic's config by name, None when it has none."""
AnyTopicTraced = Callable[[], bool]
"""Whether some topic's config turns tracing on."""


def check_sample_rate(rate: float) -> float:
    """The rate itself; ValueError unless it is in (0, 1]."""
    if not 0 < rate <= 1:
        raise ValueError(f"the trace sample rate must be above 0 and at most 1, not {rate}")
    return rate


def original_topic(topic: str, retry_topic_of_copy: str | None) -> str:
    """The topic a copy in a retry or DLQ topic was first sent to (its RETRY_TOPIC)."""
    if is_group_topic(topic) and retry_topic_of_copy:
        return retry_topic_of_copy
    return topic


class TraceSwitch:
    """Decides whether a topic, and a message of it, is traced."""

    __slots__ = ("_any_topic_traced", "_threshold", "_topic", "default", "sample_rate")

    def __init__(
        self,
        topic: TopicLookup,
        any_topic_traced: AnyTopicTraced,
        *,
        default: bool = False,
        sample_rate: float = 1.0,
    ) -> None:
        self._topic = topic
        self._any_topic_traced = any_topic_traced
        self.default = default
        self.sample_rate = check_sample_rate(sample_rate)
        self._threshold = int(sample_rate * _HASH_SPACE)

    @classmethod
    def off(cls) -> TraceSwitch:
        """A switch that traces nothing."""
        return cls(lambda _topic: None, lambda: False)

    def for_config(self, config: TopicConfig) -> bool:
        """Whether the topic of ``config`` is traced (before sampling)."""
        return self.default if config.trace is None else config.trace

    def for_topic(self, topic: str) -> bool:
        """Whether ``topic`` is traced; a retry or DLQ topic is traced when any topic may be
        (its copies are decided by their original topic, see :meth:`for_copy`)."""
        if is_group_topic(topic):
            return self.default or self._any_topic_traced()
        config = self._topic(topic)
        if config is None:
            return self.default
        return self.for_config(config)

    def sampled(self, msg_id: str) -> bool:
        """Whether the sampling rate takes the message ``msg_id``."""
        if self._threshold >= _HASH_SPACE:
            return True
        return zlib.crc32(msg_id.encode()) < self._threshold

    def for_message(self, topic: str, msg_id: str) -> bool:
        """Whether the message ``msg_id`` of (original) ``topic`` is traced."""
        return self.for_topic(topic) and self.sampled(msg_id)

    def state(self, topic: str, msg_id: str) -> str:
        """ "on", "off" (its topic is not traced) or "sampled_out"."""
        if not self.for_topic(topic):
            return "off"
        return "on" if self.sampled(msg_id) else "sampled_out"


def any_topic_traced(
    version: Callable[[], int], configs: Callable[[], list[TopicConfig]]
) -> AnyTopicTraced:
    """Whether some topic config has ``trace`` true, read again when the configs' version
    (``version``) has changed."""
    known: list[int | bool] = [-1, False]

    def check() -> bool:
        current = version()
        if known[0] != current:
            known[:] = [current, any(config.trace for config in configs())]
        return bool(known[1])

    return check
