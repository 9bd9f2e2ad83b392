"""Which queues a subscription covers right now, where a read starts or ends, and what
retention took from under a query.

Queues are discovered on every trigger: a topic that gains queues, or a new topic matching
``subscribePattern``, is read from its earliest offset (as Kafka's new partitions are).

A trigger that finds every queue at the query's position waits for an arrival with the
broker's long poll (:func:`wait_for_arrival`) rather than ask again at once: Spark's trigger
loop asks for the latest offsets every few milliseconds while there is nothing new.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from enum import Enum
from typing import Final

from spark_jobs.errors import DataLossError, LostOffsets, UnknownTopicError
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
HEAD_POLLS: Final = 16
"""The most queues a trigger at the head long-polls at once; Spark's trigger loop alone asks
again for a subscription of more."""
HEAD_POLL_GRACE_S: Final = 1.0
"""How long past its ``wait_ms`` a trigger waits for its long polls' answers."""
_PAST_POSITION: Final = frozenset({"FOUND", "NO_MATCHED_MESSAGE"})
"""A range read's statuses where something was stored at or after the offset it read."""


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


def at_head(positions: Positions, states: QueueStates) -> bool:
    """Whether no queue of ``states`` holds anything past its position in ``positions``."""
    return all(
        state.max_offset <= positions.get(key, state.max_offset) for key, state in states.items()
    )


def wait_for_arrival(
    client: SpoolmqClient,
    positions: Positions,
    tags: str | None,
    sql: str | None,
    wait_ms: int,
) -> None:
    """Long-poll the queues at ``positions`` (their heads) at once, for up to ``wait_ms``:
    return as soon as one of them holds something past its position (what the filters skip
    too), or once none did in that time. A poll that fails ends the wait as well: the next
    look at the queues tells what is wrong. Polls still parked when it returns end on their
    own within ``wait_ms``."""
    if wait_ms <= 0 or not 0 < len(positions) <= HEAD_POLLS:
        return
    pool = ThreadPoolExecutor(max_workers=len(positions), thread_name_prefix="spoolmq-head")
    try:
        polls = [
            pool.submit(_arrived, client, key, offset, tags, sql, wait_ms)
            for key, offset in positions.items()
        ]
        for poll in as_completed(polls, timeout=wait_ms / 1000 + HEAD_POLL_GRACE_S):
            if poll.exception() is not None or poll.result():
                return
    except TimeoutError:  # a poll being retried (a group without a master): ask again
        return
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _arrived(
    client: SpoolmqClient,
    key: tuple[str, int],
    offset: int,
    tags: str | None,
    sql: str | None,
    wait_ms: int,
) -> bool:
    """One queue's long poll at ``offset``: whether something came (one record at most)."""
    answer = client.records(key[0], key[1], offset, offset + 1, 1, tags, sql, wait_ms)
    return answer.status in _PAST_POSITION


def with_new_queues(start: Positions, states: QueueStates) -> Positions:
    """``start`` plus every queue it does not know yet, from that queue's min offset."""
    begin = dict(start)
    for key, state in states.items():
        if key not in begin:
            LOG.info("reading new queue %s/%d from offset %d", *key, state.min_offset)
            begin[key] = state.min_offset
    return begin


class LossCase(Enum):
    """Where positions below a queue's min offset came from: it decides what to change."""

    STARTING_OFFSETS = "startingOffsets"
    """A new query's start (or a batch read's), resolved from ``startingOffsets``."""
    CHECKPOINT = "checkpoint"
    """A position the query had reached: its checkpoint's after a restart, or its last
    micro-batch's end."""
    WHILE_READING = "while reading"
    """A planned range whose offsets went while an executor read it."""


def skip_lost(
    begin: Positions, states: QueueStates, case: LossCase, fail_on_data_loss: bool
) -> Positions:
    """``begin`` with every queue that retention cut below moved up to its min offset, or
    DataLossError naming all of them when ``fail_on_data_loss``."""
    lost = [
        LostOffsets(key[0], key[1], offset, states[key].min_offset)
        for key, offset in sorted(begin.items())
        if key in states and offset < states[key].min_offset
    ]
    report_losses(lost, case, fail_on_data_loss)
    return {**begin, **{(loss.topic, loss.queue_id): loss.lost_to for loss in lost}}


def report_losses(losses: Sequence[LostOffsets], case: LossCase, fail: bool) -> None:
    """``losses`` are gone: DataLossError naming every one of them, or log them and go on."""
    if losses and fail:
        raise DataLossError(losses, loss_advice(case, losses))
    for loss in losses:
        LOG.warning("%s are no longer stored; skipped (failOnDataLoss=false)", loss)


def loss_advice(case: LossCase, losses: Sequence[LostOffsets]) -> str:
    """What the user can change about ``losses``, which came about as ``case`` says."""
    skip = "or set failOnDataLoss=false to skip what is gone and read on"
    if case is LossCase.STARTING_OFFSETS:
        floors = "; ".join(f"{loss.topic}/{loss.queue_id}: {loss.lost_to}" for loss in losses)
        return (
            f"The query's startingOffsets lie below the queues' min offsets ({floors}): "
            f'start from "earliest" or from offsets at or above the min offsets, {skip}.'
        )
    if case is LossCase.CHECKPOINT:
        return (
            "The query's checkpoint points below the queues' min offsets (retention removed "
            "what the query had not read yet): restart it from a new checkpoint (it then "
            f"starts at startingOffsets), {skip}."
        )
    return (
        "Retention removed them while the query read them: run it again (a streaming query "
        f"from a new checkpoint), {skip}."
    )


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
