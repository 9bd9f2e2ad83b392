"""A kill -9 of the broker under the official client's producer and simple consumer.

The server is killed while both run, and started again on the same store and ports; the
clients reconnect by themselves (their sends and receives fail meanwhile). Every message the
producer got a receipt for is received in the end: a receipt means stored, and what a
consumer had not acked when the broker died comes back once its invisibility ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from rocketmq import Producer, SimpleConsumer  # type: ignore[import-untyped]

from tests.app.grpc.support import Face, consumer_of, message, serving

SENDS_BEFORE_KILL = 20
SENDS = 60
DEADLINE_S = 180.0
INVISIBLE_S = 5
"""The consumer's invisibility: what it took but did not ack comes back this much later."""


class Producing:
    """A producer sending numbered messages in a thread, keeping the ids it got receipts for."""

    def __init__(self, producer: Producer, topic: str) -> None:
        self.producer = producer
        self.topic = topic
        self.receipts: list[str] = []
        self.failures = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="grpc-producing")

    def _run(self) -> None:
        deadline = time.monotonic() + DEADLINE_S
        n = 0
        while len(self.receipts) < SENDS and not self.stop.is_set():
            if time.monotonic() > deadline:
                return
            try:
                receipt = self.producer.send(message(self.topic, f"m{n}".encode()))
            except Exception:  # the broker is down: the client's own retries ran out
                self.failures += 1
                time.sleep(0.2)
                continue
            self.receipts.append(receipt.message_id)
            n += 1


class Consuming:
    """A simple consumer receiving and acking in a thread, keeping the ids it received."""

    def __init__(self, consumer: SimpleConsumer) -> None:
        self.consumer = consumer
        self.received: set[str] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="grpc-consuming")

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for received in self.consumer.receive(16, INVISIBLE_S):
                    self.received.add(received.message_id)
                    self.consumer.ack(received)
            except Exception:  # the broker is down; an unacked message comes back later
                time.sleep(0.2)


def wait_until(condition: Callable[[], bool], deadline_s: float = DEADLINE_S) -> bool:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_after_a_kill_9_and_a_restart_every_receipted_send_is_received(
    tmp_path: Path,
) -> None:
    with serving(tmp_path / "store") as face:
        topic = face.topic("grpc-crash", queues=2)
        run_through_a_crash(face, topic)


def run_through_a_crash(face: Face, topic: str) -> None:
    producer = Producer(face.config(), (topic,))
    producer.startup()
    consumer = consumer_of(face, "grpc-crash-workers", topic)
    producing, consuming = Producing(producer, topic), Consuming(consumer)
    try:
        producing.thread.start()
        consuming.thread.start()
        assert wait_until(lambda: len(producing.receipts) >= SENDS_BEFORE_KILL)
        face.server.kill()
        time.sleep(1)  # the clients see it gone
        face.server.restart()
        producing.thread.join(DEADLINE_S)
        receipted = set(producing.receipts)
        assert len(receipted) >= SENDS
        assert wait_until(lambda: receipted <= consuming.received), (
            f"{len(receipted - consuming.received)} receipted sends never received"
        )
    finally:
        producing.stop.set()
        consuming.stop.set()
        producing.thread.join(DEADLINE_S)
        consuming.thread.join(DEADLINE_S)
        consumer.shutdown()
        producer.shutdown()
