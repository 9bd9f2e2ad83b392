"""What kill -9 cannot show, on the power-cut file system: power cuts under load lose no
acknowledged message with SYNC flush; an fsync that fails with EIO stops acknowledgements
(the broker says why) and a restart recovers from what is on disk."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.conftest import start_server
from tests.powercut_rounds import Ledger, cut_round, stored_messages
from tests.powercut_support import powercut_fs

CUTS = 3  # the bench (bench/power_cut_bench.py) runs twenty and more


def test_power_cuts_under_sync_flush_lose_nothing_acknowledged(tmp_path: Path) -> None:
    backing, mount_point = tmp_path / "backing", tmp_path / "mnt"
    ledger = Ledger()
    for _ in range(CUTS):
        cut_round(backing, mount_point, "sync", ledger, producers=4, acks=150)
    stored = stored_messages(backing, mount_point, "sync")
    assert ledger.restored_pages > 0, "the cuts took unsynced data away"
    lost = [msg_id for msg_id, body in ledger.acknowledged.items() if stored.get(msg_id) != body]
    assert lost == []
    assert len(ledger.acknowledged) >= CUTS * 150


def test_eio_on_fsync_stops_acknowledgements_and_a_restart_recovers(tmp_path: Path) -> None:
    with powercut_fs(tmp_path / "backing", tmp_path / "mnt") as fs:
        store = tmp_path / "mnt" / "store"
        live = start_server(store, flush="sync", commit_log_file_size=1024 * 1024)
        try:
            with httpx.Client(base_url=live.url, timeout=30) as client:
                acknowledged = [
                    client.post("/v1/topics/Eio/messages", json={"body": f"m{i}"}).json()
                    for i in range(5)
                ]
                fs.fail_fsync()
                failed = client.post("/v1/topics/Eio/messages", json={"body": "lost?"})
                assert failed.status_code == 503
                assert failed.json()["code"] == "STORE_FLUSH_FAILED"
                refused = client.post("/v1/topics/Eio/messages", json={"body": "after"})
                assert refused.json()["code"] == "STORE_FLUSH_FAILED"
                ready = client.get("/readyz")
                assert ready.status_code == 503
                assert "fsync of the CommitLog failed" in ready.json()["detail"]
                assert "spoolmq_store_flush_failed 1" in client.get("/metrics").text
                # Reads go on.
                first = acknowledged[0]["messages"][0]["msg_id"]
                assert client.get(f"/v1/messages/{first}").status_code == 200
        finally:
            live.stop()
        assert (store / "abort").exists(), "no clean shutdown after a failed fsync"
        fs.heal()
        live = start_server(store, flush="sync", commit_log_file_size=1024 * 1024)
        try:
            with httpx.Client(base_url=live.url, timeout=30) as client:
                for receipt in acknowledged:
                    msg_id = receipt["messages"][0]["msg_id"]
                    assert client.get(f"/v1/messages/{msg_id}").status_code == 200
                later = client.post("/v1/topics/Eio/messages", json={"body": "recovered"})
                assert later.status_code == 201
        finally:
            live.stop()
