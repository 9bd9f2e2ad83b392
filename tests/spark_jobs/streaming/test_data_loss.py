"""Retention removed offsets a query still needed: ``failOnDataLoss=true`` fails with an error
naming every queue's lost offsets and what to change (``startingOffsets`` for a new query, a
new checkpoint for a restarted one), ``false`` skips what is gone and reads on. The server's
files are removed on its own event loop, as its cleaner would."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Row, SparkSession

from spark_jobs.errors import DataLossError
from spark_jobs.http_client import QueueState
from spark_jobs.streaming.discovery import LossCase, QueueStates, skip_lost
from tests.app.test_pull_statuses import send_many, store_of
from tests.conftest import LiveServer, start_server
from tests.spark_jobs.streaming.available_now import run_available_now

TWO_QUEUES_LOST: QueueStates = {
    ("Orders", 0): QueueState("Orders", 0, min_offset=395, max_offset=900),
    ("Orders", 1): QueueState("Orders", 1, min_offset=395, max_offset=900),
    ("Orders", 2): QueueState("Orders", 2, min_offset=0, max_offset=900),
}
AT_20: dict[tuple[str, int], int] = dict.fromkeys(TWO_QUEUES_LOST, 20)


def test_a_loss_names_every_queue_and_its_range() -> None:
    with pytest.raises(DataLossError) as raised:
        skip_lost(AT_20, TWO_QUEUES_LOST, LossCase.CHECKPOINT, fail_on_data_loss=True)
    message = str(raised.value)
    assert "Orders/0: offsets 20 to 394 (375 messages)" in message
    assert "Orders/1: offsets 20 to 394 (375 messages)" in message
    assert "Orders/2" not in message
    assert message.startswith("Offsets the query needs are no longer stored (750 in 2 queues): ")
    assert [(x.topic, x.queue_id, x.lost_from, x.lost_to) for x in raised.value.losses] == [
        ("Orders", 0, 20, 395),
        ("Orders", 1, 20, 395),
    ]


def test_a_loss_at_a_new_query_start_blames_its_starting_offsets() -> None:
    with pytest.raises(DataLossError) as raised:
        skip_lost(AT_20, TWO_QUEUES_LOST, LossCase.STARTING_OFFSETS, fail_on_data_loss=True)
    assert raised.value.advice == (
        "The query's startingOffsets lie below the queues' min offsets (Orders/0: 395; "
        'Orders/1: 395): start from "earliest" or from offsets at or above the min offsets, '
        "or set failOnDataLoss=false to skip what is gone and read on."
    )


def test_a_loss_below_a_checkpoint_asks_for_a_new_checkpoint() -> None:
    with pytest.raises(DataLossError) as raised:
        skip_lost(AT_20, TWO_QUEUES_LOST, LossCase.CHECKPOINT, fail_on_data_loss=True)
    advice = raised.value.advice
    assert advice.startswith("The query's checkpoint points below the queues' min offsets")
    assert "restart it from a new checkpoint" in advice and "failOnDataLoss=false" in advice
    assert "startingOffsets lie" not in advice


def test_without_fail_on_data_loss_every_queue_moves_up_to_its_min_offset() -> None:
    moved = skip_lost(AT_20, TWO_QUEUES_LOST, LossCase.CHECKPOINT, fail_on_data_loss=False)
    assert moved == {("Orders", 0): 395, ("Orders", 1): 395, ("Orders", 2): 20}


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[LiveServer]:
    """64 KiB CommitLog files: about 30 messages of 2 KB each."""
    live = start_server(tmp_path / "store", commit_log_file_size=64 * 1024)
    yield live
    live.stop()


def expire_oldest_files(live: LiveServer, topic: str, files: int) -> dict[int, int]:
    """Delete the oldest CommitLog files and let the topic's queues notice; their new min
    offsets."""
    store = store_of(live)

    def clean() -> dict[int, int]:
        store.commit_log.queue.delete_first_files(files)
        mins = {}
        for queue_id in (0, 1):
            queue = store.find_consume_queue(topic, queue_id)
            assert queue is not None
            queue.delete_expired_files(store.commit_log.min_offset)
            queue.correct_min_offset(store.commit_log.min_offset)
            mins[queue_id] = queue.min_offset
        return mins

    return live.call(clean)


def send_to_both_queues(client: httpx.Client, topic: str, count: int) -> None:
    """``count`` messages of 2 KB into each of queues 0 and 1, ten at a time in turns, so
    the CommitLog files hold both queues' messages."""
    for _ in range(0, count, 10):
        for queue_id in (0, 1):
            part = {"messages": [{"body": "x" * 2000}] * 10, "queue_id": queue_id}
            assert client.post(f"/v1/topics/{topic}/messages", json=part).status_code == 201


def stream_once(
    spark: SparkSession, url: str, topic: str, checkpoint: Path, **options: str
) -> tuple[list[Row], Exception | None]:
    """Trigger.AvailableNow over ``topic``; the rows read, and the query's error if any."""
    given = {"spoolmq.endpoints": url, "subscribe": topic, "startingOffsets": "earliest"}
    run = run_available_now(spark, {**given, **options}, checkpoint)
    return run.rows, run.error


def test_lost_offsets_fail_the_query_clearly_or_are_skipped(
    spark: SparkSession, tiny: LiveServer, tmp_path: Path
) -> None:
    client, topic = tiny.client(), f"Exp{uuid.uuid4().hex[:8]}"
    queues = {"write_queue_nums": 2, "read_queue_nums": 2}
    assert client.put(f"/v1/topics/{topic}", json=queues).status_code == 201
    send_to_both_queues(client, topic, 20)  # queues 0 and 1: offsets 0-19
    checkpoint = tmp_path / "chk"
    first, error = stream_once(spark, tiny.url, topic, checkpoint)
    assert error is None and len(first) == 40

    send_to_both_queues(client, topic, 60)  # offsets 20-79, over more files
    mins = expire_oldest_files(tiny, topic, 2)
    assert all(20 < m < 80 for m in mins.values())  # the query's positions, 20, are gone

    _, error = stream_once(spark, tiny.url, topic, checkpoint)  # restarted: its checkpoint
    assert error is not None
    message = str(error)
    for queue_id, min_offset in mins.items():
        assert f"{topic}/{queue_id}: offsets 20 to {min_offset - 1}" in message
    assert "no longer stored" in message
    assert "checkpoint points below the queues' min offsets" in message
    assert "new checkpoint" in message and "failOnDataLoss=false" in message

    below = json.dumps({topic: {"0": 0, "1": 0}})  # a new query, asking for what is gone
    _, error = stream_once(spark, tiny.url, topic, tmp_path / "new", startingOffsets=below)
    assert error is not None
    message = str(error)
    for queue_id, min_offset in mins.items():
        assert f"{topic}/{queue_id}: offsets 0 to {min_offset - 1}" in message
    assert f"startingOffsets lie below the queues' min offsets ({topic}/0: {mins[0]}; " in message
    assert "checkpoint points below" not in message

    rest, error = stream_once(spark, tiny.url, topic, checkpoint, failOnDataLoss="false")
    assert error is None
    read = sorted((r.queue_id, r.queue_offset) for r in rest)
    assert read == sorted((q, o) for q, m in mins.items() for o in range(m, 80))


def test_offsets_removed_while_a_batch_reads_them_are_lost_too(
    spark: SparkSession, tiny: LiveServer, tmp_path: Path
) -> None:
    client, topic = tiny.client(), f"Gone{uuid.uuid4().hex[:8]}"
    send_many(client, topic, 80, 2000)
    # The CommitLog file is gone but the queue has not noticed yet: its min offset is still
    # 0, so the batch is planned from 0 and the executor's pulls find MESSAGE_WAS_REMOVING.
    tiny.call(lambda: store_of(tiny).commit_log.queue.delete_first_files(1))
    frame = (
        spark.read.format("spoolmq")
        .option("spoolmq.endpoints", tiny.url)
        .option("subscribe", topic)
    )
    with pytest.raises(PySparkException, match="Retention removed them while the query read"):
        frame.load().collect()
    kept = frame.option("failOnDataLoss", "false").load().collect()
    offsets = sorted(r.queue_offset for r in kept)
    assert offsets and offsets[0] > 0 and offsets == list(range(offsets[0], 80))
