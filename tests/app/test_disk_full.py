"""A store on a small tmpfs filled by 4 producers (SYNC flush): sends are refused with
503 DISK_FULL before the disk is out of space, nothing acknowledged is lost, reads, commits and
the admin pages keep working and say why; once the file system is grown, writes resume
without a restart."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, start_server
from tests.disk_support import resize, tmpfs

TOPIC = "Fill"
BODY = "x" * 4096
PRODUCERS = 4
MAX_SENDS = 20_000  # bounds the fill: 24 MiB hold about 5,000 such messages


@pytest.fixture
def full_disk_server(tmp_path: Path) -> Iterator[tuple[LiveServer, Path]]:
    with tmpfs(tmp_path / "disk", "24m") as disk:
        live = start_server(
            disk / "store",
            flush="sync",
            commit_log_file_size=2 * 1024 * 1024,
            max_hash_slot_num=1000,
            max_index_num=4000,
            # Over 85 % RocketMQ's forced clean deletes the oldest files even unexpired: off,
            # so that every acknowledged message can be checked (retention is tested apart).
            clean_file_forcibly_enable=False,
        )
        try:
            yield live, disk
        finally:
            live.stop()


class Fill:
    """What the producers were answered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acknowledged: list[str] = []
        self.refusals: list[tuple[int, str, str]] = []  # (status, code, detail)
        self.other: list[tuple[int, str]] = []
        self.sent = 0

    def producer(self, url: str) -> None:
        with httpx.Client(base_url=url, timeout=30) as client:
            refused_in_a_row = 0
            while refused_in_a_row < 5:
                with self.lock:
                    if self.sent >= MAX_SENDS:
                        return
                    self.sent += 1
                response = client.post(
                    f"/v1/topics/{TOPIC}/messages", json={"body": BODY, "queue_id": 0}
                )
                with self.lock:
                    if response.status_code == 201:
                        receipt = response.json()["messages"][0]
                        if receipt["status"] == "PUT_OK":
                            self.acknowledged.append(receipt["msg_id"])
                            refused_in_a_row = 0
                            continue
                    if response.status_code == 503:
                        problem = response.json()
                        self.refusals.append((503, problem["code"], problem["detail"]))
                        refused_in_a_row += 1
                    else:
                        self.other.append((response.status_code, response.text))
                        return


def pulled_ids(client: httpx.Client) -> list[str]:
    ids: list[str] = []
    offset = 0
    while True:
        page = client.get(
            f"/v1/topics/{TOPIC}/queues/0/messages", params={"offset": offset, "max_messages": 32}
        ).json()
        if not page["messages"]:
            return ids
        ids += [m["msg_id"] for m in page["messages"]]
        offset = page["next_offset"]


def test_a_full_disk_refuses_sends_keeps_reads_and_heals_when_grown(
    full_disk_server: tuple[LiveServer, Path],
) -> None:
    live, disk = full_disk_server
    fill = Fill()
    with ThreadPoolExecutor(PRODUCERS) as pool:
        for done in [pool.submit(fill.producer, live.url) for _ in range(PRODUCERS)]:
            done.result()
    assert fill.other == []
    assert fill.refusals, f"{fill.sent} sends and no refusal"
    assert {code for _, code, _ in fill.refusals} == {"DISK_FULL"}
    # The watch refused before the file system ran out: the detail names the ratio.
    assert "% used, limit 90%" in fill.refusals[0][2]

    with httpx.Client(base_url=live.url, timeout=30) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "disk full" in ready.json()["detail"]
        metrics = client.get("/metrics").text
        assert "spoolmq_store_disk_full 1" in metrics
        assert 'spoolmq_disk_used_ratio{path="' in metrics
        assert 'id="store-refusal"' in client.get("/admin/").text
        # Reads and commits go on while full; nothing acknowledged is missing.
        assert set(fill.acknowledged) <= set(pulled_ids(client))
        committed = client.post(
            "/v1/groups/readers/offsets",
            json={"offsets": [{"topic": TOPIC, "queue_id": 0, "offset": 1}]},
        )
        assert committed.status_code == 200

        resize(disk, "64m")
        deadline = time.monotonic() + 30
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "writes did not resume after the disk grew"
            time.sleep(0.05)
        assert "spoolmq_store_disk_full 0" in client.get("/metrics").text
        assert 'id="store-refusal"' not in client.get("/admin/").text
        later = client.post(f"/v1/topics/{TOPIC}/messages", json={"body": "later", "queue_id": 0})
        assert later.status_code == 201 and later.json()["messages"][0]["status"] == "PUT_OK"
        ids = pulled_ids(client)
        assert set(fill.acknowledged) <= set(ids)
        assert ids[-1] == later.json()["messages"][0]["msg_id"]
