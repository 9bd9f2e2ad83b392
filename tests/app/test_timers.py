"""Timer messages over HTTP, with SYNC and ASYNC flush: deliver_at (epoch ms or ISO 8601) and
exact deliver_after_ms on single, batch and raw sends, never visible before their time;
cancel by the receipt's handle; the errors a client can make."""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, start_server, wait_until
from tests.timer_rounds import delivered

PRECISION_MS = 100


@pytest.fixture(scope="module", params=["async", "sync"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    live = start_server(
        tmp_path_factory.mktemp("store"), flush=request.param, timer_precision_ms=PRECISION_MS
    )
    yield live
    live.stop()


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


def now_ms() -> int:
    return int(time.time() * 1000)


def send(http: httpx.Client, topic: str, **body: Any) -> list[dict[str, Any]]:
    response = http.post(f"/v1/topics/{topic}/messages", json=body)
    assert response.status_code == 201, response.text
    receipts: list[dict[str, Any]] = response.json()["messages"]
    return receipts


def pull_all(http: httpx.Client, topic: str) -> list[dict[str, Any]]:
    return sorted(delivered(http, topic), key=lambda m: m["store_timestamp"])


def test_single_batch_and_raw_sends_are_delivered_in_time_order_never_early(
    http: httpx.Client, topic: str
) -> None:
    start = now_ms()
    iso = datetime.fromtimestamp((start + 900) / 1000, UTC).isoformat(timespec="milliseconds")
    [late] = send(http, topic, body="iso", deliver_at=iso, properties={"color": "red"})
    [early] = send(http, topic, body="after", deliver_after_ms=300, tags="T")
    batch = send(
        http,
        topic,
        messages=[{"body": "b1"}, {"body": "b2", "deliver_after_ms": 150}],
        deliver_after_ms=600,
    )
    raw = http.post(
        f"/v1/topics/{topic}/messages",
        params={"deliver_at": str(start + 1200), "tags": "R"},
        content=b"raw",
        headers={"content-type": "application/octet-stream"},
    )
    assert raw.status_code == 201, raw.text
    receipts = [late, early, *batch, raw.json()["messages"][0]]
    assert all(r["queue_offset"] == -1 and r["timer_handle"] for r in receipts)
    assert abs(late["deliver_at"] - (start + 900)) <= 1
    assert pull_all(http, topic) == [], "nothing is visible before its time"

    wait_until(lambda: len(pull_all(http, topic)) == 5, timeout=15)
    delivered = pull_all(http, topic)
    names = ["iso", "after", "b1", "b2", "raw"]
    due = {name: r["deliver_at"] for name, r in zip(names, receipts, strict=True)}
    assert sorted(m["body"] for m in delivered) == sorted(names)
    for message in delivered:
        assert message["store_timestamp"] >= due[message["body"]], "not before it is due"
    # In the order they fall due (the sends' own times decide it: on a slow machine the batch
    # may be sent after "iso" falls due); within one precision of the wheel, either order.
    dues = [due[m["body"]] for m in delivered]
    assert all(b >= a - PRECISION_MS for a, b in itertools.pairwise(dues)), (delivered, due)
    by_body = {m["body"]: m for m in delivered}
    assert by_body["iso"]["properties"]["color"] == "red"
    assert by_body["after"]["tags"] == "T"
    assert by_body["raw"]["tags"] == "R"


def test_cancel_before_delivery_wins_and_after_delivery_is_refused(
    http: httpx.Client, topic: str
) -> None:
    [doomed, kept] = [
        send(http, topic, body=b, deliver_after_ms=800)[0] for b in ("doomed", "kept")
    ]
    url = f"/v1/topics/{topic}/timers/{doomed['timer_handle']}"
    cancelled = http.delete(url)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["outcome"] == "cancelled"
    assert cancelled.json()["uniq_key"] == doomed["uniq_key"]
    assert http.delete(url).json()["outcome"] == "already_cancelled"
    assert timer_metric(http, "spoolmq_timer_cancels_accepted_total") >= 1  # answered at once

    wait_until(lambda: len(pull_all(http, topic)) == 1, timeout=15)
    time.sleep(0.5)
    assert [m["body"] for m in pull_all(http, topic)] == ["kept"], "a cancelled one never comes"
    late = http.delete(f"/v1/topics/{topic}/timers/{kept['timer_handle']}")
    assert late.status_code == 409
    assert late.json()["code"] == "TIMER_ALREADY_DELIVERED"


def timer_metric(http: httpx.Client, name: str) -> int:
    """One of /metrics' timer counters."""
    for line in http.get("/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return int(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is not in /metrics")


def test_bad_handles_and_times_are_refused_clearly(http: httpx.Client, topic: str) -> None:
    [receipt] = send(http, topic, body="x", deliver_after_ms=60_000)
    handle = receipt["timer_handle"]
    assert http.delete(f"/v1/topics/{topic}/timers/not-a-handle").json()["code"] == (
        "INVALID_TIMER_HANDLE"
    )
    other = http.delete(f"/v1/topics/{topic}x/timers/{handle}")
    assert (other.status_code, other.json()["code"]) == (400, "INVALID_TIMER_HANDLE")
    text = base64.urlsafe_b64decode(handle + "==").decode().split(" ")
    text[4] = "0" * 32
    unknown = base64.urlsafe_b64encode(" ".join(text).encode()).decode().rstrip("=")
    missing = http.delete(f"/v1/topics/{topic}/timers/{unknown}")
    assert (missing.status_code, missing.json()["code"]) == (404, "TIMER_NOT_FOUND")

    def refused(body: dict[str, Any]) -> tuple[int, str]:
        response = http.post(f"/v1/topics/{topic}/messages", json=body)
        return response.status_code, response.json()["code"]

    assert refused({"body": "x", "deliver_after_ms": 4 * 86_400_000}) == (
        400,
        "TIMER_MESSAGE_ILLEGAL",
    )
    assert refused({"body": "x", "deliver_at": now_ms(), "deliver_after_ms": 5}) == (
        422,
        "INVALID_PROPERTY",
    )
    assert refused({"body": "x", "deliver_at": "tomorrow"})[0] == 422
    assert refused({"body": "x", "deliver_after_ms": 5, "delay_level": 2})[1] == "INVALID_PROPERTY"
    mixed = {"messages": [{"body": "a", "deliver_after_ms": 500}, {"body": "b"}]}
    assert refused(mixed) == (422, "BATCH_REJECTED")
    assert refused({"body": "x", "properties": {"TIMER_DELIVER_MS": "1"}})[1] == "INVALID_PROPERTY"


def test_a_time_already_passed_is_delivered_at_once(http: httpx.Client, topic: str) -> None:
    [receipt] = send(http, topic, body="now", deliver_at=now_ms() - 60_000)
    assert receipt["queue_offset"] >= 0, "stored straight into its topic"
    assert receipt["timer_handle"] is None
    assert [m["body"] for m in pull_all(http, topic)] == ["now"]


def test_the_timer_status_and_metrics_say_where_the_wheel_stands(
    http: httpx.Client, topic: str
) -> None:
    send(http, topic, body="x", deliver_after_ms=100)
    wait_until(lambda: len(pull_all(http, topic)) == 1, timeout=15)
    status = http.get("/v1/timers").json()
    assert status["running"] is True
    assert (status["precision_ms"], status["max_delay_s"]) == (100, 259_200)
    assert status["delivered"] >= 1
    assert status["read_time_ms"] <= now_ms()
    metrics = dict(
        line.rsplit(" ", 1)
        for line in http.get("/metrics").text.splitlines()
        if line.startswith("spoolmq_timer_")
    )
    assert int(metrics["spoolmq_timer_delivered_total"]) >= 1
    assert int(metrics[f'spoolmq_timer_topic_delivered_total{{topic="{topic}"}}']) == 1
    assert int(metrics["spoolmq_timer_lateness_seconds_count"]) >= 1
    assert metrics["spoolmq_timer_enqueue_behind"] == "0"
