"""Power-cut rounds over HTTP, shared by the test (a few cuts) and the bench (twenty or more):
a ``spoolmq serve`` process on the power-cut file system takes sends from several producers;
the power is cut mid-load (the server is killed with SIGKILL, then every unsynced byte is
lost); the file system is mounted again and the next round starts on the recovered store.
What was acknowledged is compared with what the store holds at the end."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.powercut_support import powercut_fs
from tests.serve_process import ServeProcess

TOPIC = "PowerCut"
QUEUES = 4


class BrokerProcess(ServeProcess):
    """``spoolmq serve`` on a store, small files, as the test asks; killed by its PID."""

    def __init__(self, store: Path, flush: str) -> None:
        small = {
            "SPOOLMQ_COMMIT_LOG_FILE_SIZE": str(1024 * 1024),
            "SPOOLMQ_CONSUME_QUEUE_UNITS_PER_FILE": "2000",
            "SPOOLMQ_MAX_HASH_SLOT_NUM": "2000",
            "SPOOLMQ_MAX_INDEX_NUM": "8000",
            "SPOOLMQ_DEFAULT_TOPIC_QUEUE_NUMS": str(QUEUES),
        }
        super().__init__(store, "--flush", flush, env=small, ready_timeout_s=120)


@dataclass
class Ledger:
    """Every acknowledged send, by msgId, with its body; and what the cuts took back."""

    acknowledged: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    restored_pages: int = 0
    cuts: int = 0


def produce(url: str, ledger: Ledger, stop: threading.Event, name: str) -> None:
    """Send until ``stop``; record each PUT_OK. A send cut off by the kill is not recorded."""
    sent = 0
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            while not stop.is_set():
                body = f"{name}-{sent}-" + "p" * 900
                sent += 1
                response = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": body})
                if response.status_code != 201:
                    continue
                receipt = response.json()["messages"][0]
                if receipt["status"] == "PUT_OK":
                    with ledger.lock:
                        ledger.acknowledged[receipt["msg_id"]] = body
    except httpx.TransportError:
        return  # the server was killed


def cut_round(
    backing: Path,
    mount_point: Path,
    flush: str,
    ledger: Ledger,
    producers: int,
    acks: int,
    cut_power: bool = True,
) -> None:
    """Mount, serve, load until ``acks`` more sends are acknowledged, then cut the power
    (or, with ``cut_power=False``, only kill the server: the kill -9 baseline)."""
    with powercut_fs(backing, mount_point) as fs:
        server = BrokerProcess(mount_point / "store", flush)
        stop = threading.Event()
        target = len(ledger.acknowledged) + acks
        threads = [
            threading.Thread(target=produce, args=(server.url, ledger, stop, f"r{ledger.cuts}p{i}"))
            for i in range(producers)
        ]
        for thread in threads:
            thread.start()
        try:
            deadline = time.monotonic() + 120
            while len(ledger.acknowledged) < target and time.monotonic() < deadline:
                time.sleep(0.01)
            server.kill()  # the power goes: first the process, then the disk cache
            if cut_power:
                ledger.restored_pages += fs.cut()
            ledger.cuts += 1
        finally:
            stop.set()
            server.kill()
            for thread in threads:
                thread.join(timeout=60)


def stored_messages(backing: Path, mount_point: Path, flush: str) -> dict[str, str]:
    """Mount once more and read every queue of the topic: msgId → body."""
    found: dict[str, str] = {}
    with powercut_fs(backing, mount_point):
        server = BrokerProcess(mount_point / "store", flush)
        try:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                for queue_id in range(QUEUES):
                    offset = 0
                    while True:
                        page = client.get(
                            f"/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                            params={"offset": offset, "max_messages": 32},
                        ).json()
                        if not page.get("messages"):
                            break
                        for message in page["messages"]:
                            found[message["msg_id"]] = message["body"]
                        offset = page["next_offset"]
                sent = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": "after"})
                assert sent.status_code == 201, sent.text
        finally:
            server.kill()
    return found
