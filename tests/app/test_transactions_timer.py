"""A transactional send with a delivery time: the time waits for the commit (deliver_after_ms
counts from the commit, deliver_at is a time), the committed message waits in the timer topic
until then, and a rolled back one is never delivered."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from tests.app.test_transactions import end, half, pulled
from tests.conftest import start_server, wait_until

DELAY_MS = 1000
PRECISION_MS = 100
TIMER_TOPIC = "rmq_sys_wheel_timer"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def stored(client: httpx.Client, msg_id: str) -> dict[str, Any]:
    answer = client.get(f"/v1/messages/{msg_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def test_deliver_after_ms_counts_from_the_commit_and_a_rollback_never_delivers(
    tmp_path: Path,
) -> None:
    topic = f"T_{uuid.uuid4().hex[:12]}"
    live = start_server(tmp_path, transaction_timeout_ms=600_000, timer_precision_ms=PRECISION_MS)
    try:
        client = live.client()
        kept = half(client, topic, body="later", deliver_after_ms=DELAY_MS)
        dropped = half(client, topic, body="never", deliver_after_ms=DELAY_MS)
        sent_at = kept["half"]["store_timestamp"]
        # Past the delay counted from the half send (and a fire of the wheel): nothing.
        time.sleep(max(0, sent_at + DELAY_MS + 3 * PRECISION_MS - now_ms()) / 1000)
        assert pulled(client, topic) == []
        assert end(client, dropped["transaction_id"], "rollback").status_code == 200
        answer = end(client, kept["transaction_id"], "commit").json()
        committed = answer["message"]
        assert committed["queue_offset"] == -1  # waiting in the timer topic
        commit_at = committed["store_timestamp"]
        assert commit_at >= sent_at + DELAY_MS
        timed = stored(client, committed["msg_id"])
        assert timed["topic"] == TIMER_TOPIC
        assert timed["properties"]["TIMER_DELAY_MS"] == str(DELAY_MS)
        assert int(timed["properties"]["TIMER_OUT_MS"]) >= commit_at + DELAY_MS - PRECISION_MS
        assert not any(name.startswith("TRAN_") for name in timed["properties"])
        wait_until(lambda: len(pulled(client, topic)) > 0)
        (delivered,) = pulled(client, topic)
        assert delivered["body"] == "later"
        assert delivered["store_timestamp"] >= commit_at + DELAY_MS
        # Repeating the commit finds the timed copy: nothing more is stored.
        again = end(client, kept["transaction_id"], "commit").json()
        assert again["repeated"] is True
        assert again["message"]["msg_id"] == committed["msg_id"]
        assert [m["body"] for m in pulled(client, topic)] == ["later"]
    finally:
        live.stop()


def test_deliver_at_is_a_time_kept_until_the_commit(tmp_path: Path) -> None:
    topic = f"T_{uuid.uuid4().hex[:12]}"
    live = start_server(tmp_path, transaction_timeout_ms=600_000, timer_precision_ms=PRECISION_MS)
    try:
        client = live.client()
        deliver_at = now_ms() + DELAY_MS
        sent = half(client, topic, body="at", deliver_at=deliver_at)
        answer = end(client, sent["transaction_id"], "commit").json()
        timed = stored(client, answer["message"]["msg_id"])
        assert timed["topic"] == TIMER_TOPIC
        assert timed["properties"]["TIMER_DELIVER_MS"] == str(deliver_at)
        wait_until(lambda: len(pulled(client, topic)) > 0)
        (delivered,) = pulled(client, topic)
        assert delivered["body"] == "at" and delivered["store_timestamp"] >= deliver_at
    finally:
        live.stop()


def test_a_delivery_time_the_commit_could_not_store_is_refused_at_the_half_send(
    tmp_path: Path,
) -> None:
    topic = f"T_{uuid.uuid4().hex[:12]}"
    live = start_server(tmp_path, transaction_timeout_ms=600_000, timer_max_delay_s=60)
    off = start_server(tmp_path / "off", transaction_timeout_ms=600_000, timer_enabled=False)
    try:
        client = live.client()
        for message in (
            {"body": "x", "deliver_after_ms": 61_000},  # beyond the timer's reach
            {"body": "x", "deliver_at": now_ms() + 61_000},
            {"body": "x", "deliver_after_ms": 10, "deliver_at": now_ms()},
            {"body": "x", "properties": {"TRAN_TIMER_DELAY_MS": "10"}},
        ):
            answer = client.post(
                f"/v1/topics/{topic}/transactions",
                json={"producer_group": "pg", "message": message},
            )
            assert answer.status_code in (400, 422), (message, answer.text)
        refused = off.client().post(
            f"/v1/topics/{topic}/transactions",
            json={"producer_group": "pg", "message": {"body": "x", "deliver_after_ms": 10}},
        )
        assert refused.status_code == 501 and refused.json()["code"] == "TIMER_NOT_ENABLED"
        assert client.get("/v1/transactions", params={"producer_group": "pg"}).json() == {
            "transactions": []
        }
    finally:
        off.stop()
        live.stop()
