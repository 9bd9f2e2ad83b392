"""Which queues a subscription covers right now, where a read starts or ends, and what
retention took from under a query.

Queues are discovered on every trigger: a topic that gains queues, or a new topic matching
``subscribePattern``, is read from its earliest offset (as Kafka's new partitions are).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from spark_jobs.errors import DataLossError, UnknownTopicError
from spark_jobs.http_client import QueueState, SpoolmqClient
from spark_jobs.options import OptionError
from spark_jobs.streaming.offsets import Positions
from spark_jobs.streaming.options import (
    EARLIEST,
    LATEST,
    Position,
    PositionKind,
    Subscription,
)

LOG = logging.getLogger("spark_jobs.streaming")

QueueStates = dict[tuple[str, int], QueueState]


def discover(client: SpoolmqClient, subscription: Subscription) -> QueueStates:
    """The subscribed queues with their min and max offsets, in queue order."""
    states: QueueStates = {}
    if subscription.pattern is not None:
        for topic in client.topic_names():
            if subscription.matches(topic):
                try:
                    states.update(_by_key(client.queues(topic)))
                except UnknownTopicError:
                    continue  # deleted since it was listed
        return states
    for topic in subscription.topics:
        states.update(_by_key(_queues_of(client, topic)))
    for topic, wanted in subscription.assigned:
        found = _by_key(_queues_of(client, topic))
        missing = [q for q in wanted if (topic, q) not in found]
        if missing:
            raise OptionError(
                f"assign names queues {missing} of topic {topic}, which has queues "
                f"{sorted(q for _, q in found)}"
            )
        states.update({(topic, q): found[(topic, q)] for q in wanted})
    return dict(sorted(states.items()))


def resolve(client: SpoolmqClient, position: Position, states: QueueStates) -> Positions:
    """The offsets ``position`` names for every queue in ``states``."""
    if position.kind is PositionKind.EARLIEST:
        return {key: state.min_offset for key, state in states.items()}
    if position.kind is PositionKind.LATEST:
        return {key: state.max_offset for key, state in states.items()}
    if position.kind is PositionKind.TIMESTAMP:
        assert position.timestamp_ms is not None
        return {
            key: client.offset_for_time(key[0], key[1], position.timestamp_ms) for key in states
        }
    given = {(topic, queue): offset for topic, queue, offset in position.offsets}
    unknown = sorted(set(given) - set(states))
    if unknown:
        raise OptionError(f"offsets name queues the subscription does not cover: {_names(unknown)}")
    missing = sorted(set(states) - set(given))
    if missing:
        raise OptionError(
            "offsets JSON must give every subscribed queue (-2: earliest, -1: latest); "
            f"missing {_names(missing)}"
        )
    return {key: _named_offset(given[key], states[key]) for key in states}


def with_new_queues(start: Positions, states: QueueStates) -> Positions:
    """``start`` plus every queue it does not know yet, from that queue's min offset."""
    begin = dict(start)
    for key, state in states.items():
        if key not in begin:
            LOG.info("reading new queue %s/%d from offset %d", *key, state.min_offset)
            begin[key] = state.min_offset
    return begin


def skip_lost(begin: Positions, states: QueueStates, fail_on_data_loss: bool) -> Positions:
    """``begin`` with every queue that retention cut below moved up to its min offset, or
    DataLossError when ``fail_on_data_loss``."""
    moved = dict(begin)
    for key, offset in begin.items():
        state = states.get(key)
        if state is None or offset >= state.min_offset:
            continue
        report_loss(key[0], key[1], offset, state.min_offset, fail_on_data_loss)
        moved[key] = state.min_offset
    return moved


def report_loss(topic: str, queue_id: int, lost_from: int, lost_to: int, fail: bool) -> None:
    """Offsets [lost_from, lost_to) are gone: fail, or log and go on."""
    count = lost_to - lost_from
    what = (
        f"{topic}/{queue_id}: offsets {lost_from} to {lost_to - 1} ({count:,} messages) are "
        "no longer stored (retention removed them before the query read them)"
    )
    if fail:
        raise DataLossError(
            f"{what}. Restart the query from a new checkpoint, or set failOnDataLoss=false "
            "to skip what is gone and read on."
        )
    LOG.warning("%s; skipped (failOnDataLoss=false)", what)


def group_of(states: Mapping[tuple[str, int], QueueState]) -> dict[tuple[str, int], str | None]:
    """Each queue's broker group (None outside a cluster)."""
    return {key: state.broker_group for key, state in states.items()}


def _queues_of(client: SpoolmqClient, topic: str) -> list[QueueState]:
    try:
        return client.queues(topic)
    except UnknownTopicError as exc:
        raise UnknownTopicError(
            f"topic {topic!r} does not exist on {', '.join(client.endpoints)}: create it "
            f"first (PUT /v1/topics/{topic}) or fix the subscription ({exc})",
            exc.status,
            exc.code,
        ) from None


def _by_key(queues: list[QueueState]) -> QueueStates:
    return {(q.topic, q.queue_id): q for q in queues}


def _named_offset(offset: int, state: QueueState) -> int:
    if offset == EARLIEST:
        return state.min_offset
    if offset == LATEST:
        return state.max_offset
    return offset


def _names(keys: list[tuple[str, int]]) -> str:
    shown = ", ".join(f"{t}/{q}" for t, q in keys[:20])
    return shown + (f" and {len(keys) - 20} more" if len(keys) > 20 else "")
