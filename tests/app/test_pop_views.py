"""POP visibility: /metrics counters, in-flight in the lag report, the admin pages (with the
holder's token name where auth is on)."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.auth_support import AuthServer, start_auth_server
from tests.conftest import LiveServer, start_server, wait_until


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("pop-views"))
    yield live
    live.stop()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert match, name
    return float(match.group(1))


def test_metrics_lag_and_admin_pages_show_what_is_in_flight(server: LiveServer) -> None:
    topic, group = f"T_{uuid.uuid4().hex[:8]}", f"G_{uuid.uuid4().hex[:8]}"
    http = server.client()
    assert http.put(f"/v1/topics/{topic}", json={"read_queue_nums": 2, "write_queue_nums": 2})
    messages = [{"body": f"m{i}", "queue_id": i % 2} for i in range(6)]
    for message in messages:
        assert http.post(f"/v1/topics/{topic}/messages", json=message).status_code == 201
    before = http.get("/metrics").text
    got = http.post(f"/v1/groups/{group}/topics/{topic}/receive", json={"max_messages": 6}).json()[
        "messages"
    ]
    assert len(got) == 6
    acked = http.post(
        f"/v1/groups/{group}/acks", json={"receipt_handles": [got[0]["receipt_handle"]] * 2}
    )
    assert acked.status_code == 200
    again = http.post(
        f"/v1/groups/{group}/acks", json={"receipt_handles": [got[0]["receipt_handle"]]}
    )
    assert [r["outcome"] for r in again.json()["results"]] == ["acked"]  # answered again...
    after = http.get("/metrics").text  # ...but the message counts as acked once
    assert (
        metric(after, "spoolmq_pop_received_total") - metric(before, "spoolmq_pop_received_total")
        == 6
    )
    assert metric(after, "spoolmq_pop_acked_total") - metric(before, "spoolmq_pop_acked_total") == 1
    assert metric(after, "spoolmq_pop_in_flight") >= 5

    offsets = http.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()
    queues = offsets["topics"][0]["queues"]
    assert sum(q["in_flight"] for q in queues) == 5
    assert offsets["total_lag"] >= 5  # counted from the lowest un-acked offset

    page = http.get("/admin/groups").text
    assert f'data-pop-group="{group}"' in page
    assert re.findall(rf'data-pop-group="{group}".*?class="num in-flight">(\d+)<', page, re.S)
    detail = http.get(f"/admin/groups/{group}/in-flight").text
    assert detail.count('class="num attempt">1<') == 5


def test_the_in_flight_page_names_the_holding_token(tmp_path: Path) -> None:
    secured = start_auth_server(tmp_path / "store")
    try:
        admin = secured.client("admin")
        consumer = secured.client("consumer")
        assert admin.put("/v1/topics/Sec_pop", json={}).status_code in (200, 201)
        assert admin.post("/v1/topics/Sec_pop/messages", json={"body": "x"}).status_code == 201
        got = consumer.post("/v1/groups/SecG_pop/topics/Sec_pop/receive", json={})
        assert got.status_code == 200, got.text
        assert len(got.json()["messages"]) == 1
        page = admin.get("/admin/groups/SecG_pop/in-flight")
        assert page.status_code == 200, page.text
        assert '<td class="name">consumer</td>' in page.text
        parked_receives_are_capped_per_token(secured)
    finally:
        secured.stop()


def parked_receives_are_capped_per_token(secured: AuthServer) -> None:
    admin = secured.client("admin")
    assert admin.put("/v1/topics/ParkedPop", json={}).status_code in (200, 201)
    first: dict[str, httpx.Response] = {}
    url = "/v1/groups/parked-pop/topics/ParkedPop/receive"

    def park() -> None:
        with secured.client("parker") as client:
            first["response"] = client.post(url, json={"wait_ms": 25_000})

    thread = threading.Thread(target=park)
    thread.start()
    wait_until(lambda: secured.live.broker.waiters.parked == 1)
    parker = secured.client("parker")
    second = parker.post(url, json={"wait_ms": 1000})
    assert second.status_code == 429, second.text
    assert second.json()["code"] == "TOO_MANY_WAITERS"
    assert parker.post(url, json={}).status_code == 200  # no wait: not a parked long-poll
    assert admin.post("/v1/topics/ParkedPop/messages", json={"body": "wake"}).status_code == 201
    thread.join(timeout=60)
    assert [m["body"] for m in first["response"].json()["messages"]] == ["wake"]
    wait_until(lambda: secured.live.broker.waiters.parked == 0)
