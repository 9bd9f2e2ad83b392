"""Retention removed offsets a query still needed: ``failOnDataLoss=true`` fails with a clear
error, ``false`` skips what is gone and reads on. The server's files are removed on its own
event loop, as its cleaner would."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import Row, SparkSession

from tests.app.test_pull_statuses import queue_of, send_many, store_of
from tests.conftest import LiveServer, start_server
from tests.spark_jobs.streaming.available_now import run_available_now


@pytest.fixture
def tiny(tmp_path: Path) -> Iterator[LiveServer]:
    """64 KiB CommitLog files: about 30 messages of 2 KB each."""
    live = start_server(tmp_path / "store", commit_log_file_size=64 * 1024)
    yield live
    live.stop()


def expire_oldest_files(live: LiveServer, topic: str, files: int) -> int:
    """Delete the oldest CommitLog files and let the queue notice; its new min offset."""
    store = store_of(live)

    def clean() -> int:
        store.commit_log.queue.delete_first_files(files)
        queue = queue_of(live, topic)
        queue.delete_expired_files(store.commit_log.min_offset)
        queue.correct_min_offset(store.commit_log.min_offset)
        return queue.min_offset

    return live.call(clean)


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
    send_many(client, topic, 20, 2000)  # queue 0: offsets 0-19
    checkpoint = tmp_path / "chk"
    first, error = stream_once(spark, tiny.url, topic, checkpoint)
    assert error is None and sorted(r.queue_offset for r in first) == list(range(20))

    send_many(client, topic, 60, 2000)  # offsets 20-79, over three more files
    min_offset = expire_oldest_files(tiny, topic, 2)
    assert 20 < min_offset < 80  # the query's position, 20, is gone

    _, error = stream_once(spark, tiny.url, topic, checkpoint)
    assert error is not None
    message = str(error)
    assert f"{topic}/0: offsets 20 to {min_offset - 1}" in message
    assert "no longer stored" in message and "failOnDataLoss=false" in message

    rest, error = stream_once(spark, tiny.url, topic, checkpoint, failOnDataLoss="false")
    assert error is None
    assert sorted(r.queue_offset for r in rest) == list(range(min_offset, 80))


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
    with pytest.raises(PySparkException, match="no longer stored"):
        frame.load().collect()
    kept = frame.option("failOnDataLoss", "false").load().collect()
    offsets = sorted(r.queue_offset for r in kept)
    assert offsets and offsets[0] > 0 and offsets == list(range(offsets[0], 80))
