"""Crash tests: a real child process appends until ``kill -9``; the store must reopen consistent.

SYNC_FLUSH: no acknowledged message is ever lost. ASYNC_FLUSH: the store always reopens
consistent (a process crash keeps the page cache, so acknowledged messages survive too).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage import MessageStore
from tests.storage.crash_writer import body_of, crash_config

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Ack:
    round_no: int
    seq: int
    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int


def run_and_kill(store_dir: Path, mode: str, round_no: int, delay: float) -> list[Ack]:
    """Start the writer, let it run ``delay`` seconds after its first ack, kill -9 it."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.storage.crash_writer", str(store_dir), mode, str(round_no)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    acks: list[Ack] = []
    first = threading.Event()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            parts = line.split()
            if len(parts) != 5:
                continue  # the last line may be cut by the kill
            seq, msg_id, topic, queue_id, queue_offset = parts
            acks.append(Ack(round_no, int(seq), msg_id, topic, int(queue_id), int(queue_offset)))
            first.set()

    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert first.wait(60), (
            f"writer produced no ack: {child.stderr.read() if child.stderr else ''}"
        )
        time.sleep(delay)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        reader.join()
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    return acks


def assert_consistent(store: MessageStore, acks: list[Ack]) -> None:
    # A kill during a memory copy may leave a torn last record: recovery reports and cuts it.
    problems = [p for p in store.check() if not p.startswith("commitlog")]
    assert problems == []
    for ack in acks:
        message = store.look_message_by_id(ack.msg_id)
        assert message is not None, f"acknowledged message {ack} is missing"
        assert message.body == body_of(ack.round_no, ack.seq)
        assert (message.topic, message.queue_id, message.queue_offset) == (
            ack.topic,
            ack.queue_id,
            ack.queue_offset,
        )
    by_queue: dict[tuple[str, int], list[Ack]] = {}
    for ack in acks:
        by_queue.setdefault((ack.topic, ack.queue_id), []).append(ack)
    for queue_acks in by_queue.values():
        offsets = [a.queue_offset for a in queue_acks]
        assert offsets == sorted(offsets), "acknowledged messages out of order"
    for topic in store.topics():
        for queue_id in store.queue_ids(topic):
            assert_queue_dense(store, topic, queue_id)


def assert_queue_dense(store: MessageStore, topic: str, queue_id: int) -> None:
    """Every unit points at the record with that queue offset, and no record appears twice."""
    queue = store.find_consume_queue(topic, queue_id)
    assert queue is not None
    seen: set[int] = set()
    for index in range(queue.min_offset, queue.max_offset):
        unit = queue.get_unit(index)
        assert unit is not None, f"{topic}/{queue_id} unit {index} unreadable"
        physical, size, _ = unit
        assert physical not in seen, f"{topic}/{queue_id}: record at {physical} dispatched twice"
        seen.add(physical)
        message = store.look_message_by_offset(physical)
        assert message is not None and message.size == size
        assert (message.topic, message.queue_id, message.queue_offset) == (topic, queue_id, index)


@pytest.mark.slow
def test_sync_flush_loses_no_acknowledged_message_across_kill_9(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    store_dir = tmp_path / "store"
    all_acks: list[Ack] = []
    for round_no in range(20):
        acks = run_and_kill(store_dir, "sync", round_no, rng.uniform(0.0, 0.4))
        assert acks, "each round acknowledges messages before the kill"
        all_acks.extend(acks)
        assert (store_dir / "abort").exists(), "a killed store leaves its abort file"
        with MessageStore.open(store_dir, crash_config("sync")) as store:
            assert not store.last_exit_ok
            assert_consistent(store, all_acks)


@pytest.mark.slow
def test_async_flush_store_reopens_consistent_after_kill_9(tmp_path: Path) -> None:
    rng = random.Random(7)
    store_dir = tmp_path / "store"
    all_acks: list[Ack] = []
    for round_no in range(8):
        all_acks.extend(run_and_kill(store_dir, "async", round_no, rng.uniform(0.0, 0.3)))
        with MessageStore.open(store_dir, crash_config("async")) as store:
            assert_consistent(store, all_acks)
    with MessageStore.open(store_dir, crash_config("async")) as store:
        assert store.last_exit_ok, "a clean close removes the abort file"
