"""Replay over HTTP into a live ``spoolmq serve`` (a subprocess on a free port of 127.0.0.1).

The bodies must land in the target topic, each with ``REPLAY_OF`` = the original msgId. What
landed is read from the server's own store files (read-only) while it runs.
"""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pyspark.sql import SparkSession

from spark_jobs.errors import AuthenticationError
from spark_jobs.replay.job import HttpTarget, Selection, run_replay
from storage.store_reader import iter_store_records
from tests.spark_jobs.stores import varied_store

TARGET = "OrdersReplay"


TOKEN = secrets.token_urlsafe(32)


@pytest.fixture
def live_spoolmq(tmp_path: Path, free_port: int, venv_bin: Path) -> Iterator[tuple[str, Path]]:
    """``spoolmq serve`` on a free port with an auth file whose one token may produce to the
    replay target only; yields (URL, store dir); stopped by its pid."""
    store_dir = tmp_path / "server-store"
    auth_file = tmp_path / "auth.toml"
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    auth_file.write_text(
        f'[[tokens]]\nname = "replayer"\nsha256 = "{digest}"\nproduce = ["{TARGET}"]\n'
    )
    log = open(tmp_path / "server.log", "wb")  # noqa: SIM115 - closed after the process ends
    process = subprocess.Popen(
        [str(venv_bin / "spoolmq"), "serve", "--store-dir", str(store_dir),
         "--host", "127.0.0.1", "--port", str(free_port), "--auth-file", str(auth_file),
         "--commit-log-file-size", str(8 * 1024 * 1024)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{free_port}"
    try:
        wait_healthy(url, process, tmp_path / "server.log")
        yield url, store_dir
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        log.close()


def wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=url, timeout=2) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"spoolmq serve exited with {process.returncode}: {log.read_text()}")
            try:
                if client.get("/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    pytest.fail(f"spoolmq serve did not answer /healthz in 60 s: {log.read_text()}")


def test_replay_lands_the_same_bodies_in_the_target_topic(
    spark: SparkSession, tmp_path: Path, live_spoolmq: tuple[str, Path]
) -> None:
    url, server_store = live_spoolmq
    written = varied_store(tmp_path / "source", count=240)
    selection = Selection((written[0].store_dir,), topics=("Orders", "Audit"))
    selected = [w for w in written if w.message.topic in ("Orders", "Audit")]
    expected = [w for w in selected if w.message.body]
    target = HttpTarget((url,), TARGET, batch_size=32, rate=2_000, token=TOKEN)
    summary = run_replay(spark, selection, url, target)
    assert summary.send is not None
    assert summary.selected == len(selected)
    # A broker refuses an empty body: such a message is left out, and counted.
    assert summary.send.empty_bodies == len(selected) - len(expected) > 0
    assert summary.send.sent == len(expected)
    # RocketMQ-style values holding \x01 cannot go through the HTTP API: left out, counted.
    assert summary.send.dropped_properties == sum("trace" in w.message.properties for w in expected)

    landed = [r.message for r in iter_store_records(server_store) if r.message.topic == TARGET]
    assert len(landed) == len(expected)
    by_origin = {m.properties["REPLAY_OF"]: m for m in landed}
    assert set(by_origin) == {w.result.msg_id for w in expected}
    for item in expected:
        replayed = by_origin[item.result.msg_id]
        assert replayed.body == item.message.body
        assert replayed.tags == item.message.properties.get("TAGS")
        assert replayed.keys == item.message.properties.get("KEYS", "").split()
    # Sent in CommitLog order, so the target's queues hold them in the original order.
    order = [m.properties["REPLAY_OF"] for m in landed]
    original = [w.result.msg_id for w in expected]
    for queue_id in {m.queue_id for m in landed}:
        in_queue = [m.properties["REPLAY_OF"] for m in landed if m.queue_id == queue_id]
        assert in_queue == [i for i in original if i in set(in_queue)]
    assert sorted(order) == sorted(original)
    # The data source reads the running server's store too.
    replays = (
        spark.read.format("spoolmq_commitlog").option("topics", TARGET).load(str(server_store))
    )
    assert replays.count() == len(expected)


def test_replay_without_the_token_is_refused_and_sends_nothing(
    spark: SparkSession, tmp_path: Path, live_spoolmq: tuple[str, Path]
) -> None:
    url, server_store = live_spoolmq
    written = varied_store(tmp_path / "source", count=20)
    selection = Selection((written[0].store_dir,), topics=("Orders",))
    with pytest.raises(AuthenticationError, match="401"):
        run_replay(spark, selection, url, HttpTarget((url,), TARGET, batch_size=8, retries=0))
    assert not [r for r in iter_store_records(server_store) if r.message.topic == TARGET]
