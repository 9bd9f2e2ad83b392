"""Long-polling over HTTP: wake on send, remaining-time re-waits, many waiters, disconnects, cap."""

from __future__ import annotations

import asyncio
import functools
import itertools
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services import WaiterRegistry
from tests.conftest import LiveServer, start_server, wait_until


def parked(live: LiveServer) -> int:
    return live.broker.waiters.parked


def send(client: httpx.Client, topic: str, **message: Any) -> None:
    response = client.post(f"/v1/topics/{topic}/messages", json={"queue_id": 0, **message})
    assert response.status_code == 201, response.text


def park_raw(live: LiveServer, path: str) -> socket.socket:
    """Send a GET on a raw socket and leave it waiting for the answer."""
    host, port = live.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return sock


def in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    thread.start()
    return thread, result


def test_long_poll_wakes_on_send(live_server: LiveServer, client: httpx.Client, topic: str) -> None:
    send(client, topic, body="old")
    before = parked(live_server)
    thread, result = in_thread(
        lambda: client.get(
            f"/v1/topics/{topic}/queues/0/messages", params={"offset": 1, "wait_ms": 25_000}
        )
    )
    wait_until(lambda: parked(live_server) > before)
    send(client, topic, body="new")
    thread.join(30)
    response = result[0]
    assert response.status_code == 200
    got = response.json()
    assert got["status"] == "FOUND"
    assert [m["body"] for m in got["messages"]] == ["new"]
    assert got["next_offset"] == 2


def test_long_poll_on_an_empty_new_queue(
    live_server: LiveServer, client: httpx.Client, topic: str
) -> None:
    assert client.put(f"/v1/topics/{topic}", json={}).status_code == 201
    thread, result = in_thread(
        lambda: client.get(f"/v1/topics/{topic}/queues/0/messages", params={"wait_ms": 25_000})
    )
    wait_until(lambda: parked(live_server) > 0)
    send(client, topic, body="first")
    thread.join(30)
    assert [m["body"] for m in result[0].json()["messages"]] == ["first"]


def test_empty_long_poll_is_a_200(client: httpx.Client, topic: str) -> None:
    send(client, topic, body="only")
    response = client.get(
        f"/v1/topics/{topic}/queues/0/messages", params={"offset": 1, "wait_ms": 200}
    )
    assert response.status_code == 200
    got = response.json()
    assert (got["status"], got["messages"], got["next_offset"]) == ("OFFSET_OVERFLOW_ONE", [], 1)


def test_wake_ups_that_do_not_match_rewait_for_the_remaining_time(
    live_server: LiveServer, client: httpx.Client, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Aa" and "BB" have the same Java hash code: a BB message wakes an "Aa" waiter, the
    exact re-check drops it, and the waiter parks again for what is left of its wait."""
    waiters = live_server.broker.waiters
    timeouts: list[float] = []
    original = WaiterRegistry.wait

    async def recording_wait(self: WaiterRegistry, keys: Any, timeout_s: float, *args: Any) -> Any:
        if self is waiters and (topic, 0) in list(keys):
            timeouts.append(timeout_s)
        return await original(self, keys, timeout_s, *args)

    monkeypatch.setattr(WaiterRegistry, "wait", recording_wait)
    assert client.put(f"/v1/topics/{topic}", json={}).status_code == 201
    thread, result = in_thread(
        lambda: client.get(
            f"/v1/topics/{topic}/queues/0/messages", params={"tags": "Aa", "wait_ms": 3000}
        )
    )
    for count in range(1, 4):
        wait_until(functools.partial(lambda n: len(timeouts) == n, count))
        send(client, topic, body="collides", tags="BB")
    thread.join(30)
    got = result[0].json()
    assert got["messages"] == []
    assert got["status"] == "NO_MATCHED_MESSAGE"
    assert got["next_offset"] == 3  # the filtered messages are skipped
    assert len(timeouts) >= 4
    assert timeouts[0] <= 3.0
    # never longer than what is left (two re-waits inside one tick of a coarse clock may ask
    # for the same time), and less as the wake-ups go on
    assert all(later <= earlier for earlier, later in itertools.pairwise(timeouts))
    assert timeouts[-1] < timeouts[0]


async def test_fifty_long_polls_on_one_queue_all_wake(live_server: LiveServer, topic: str) -> None:
    async with httpx.AsyncClient(base_url=live_server.url, timeout=40) as client:
        response = await client.put(f"/v1/topics/{topic}", json={})
        assert response.status_code == 201
        before = parked(live_server)
        polls = [
            asyncio.create_task(
                client.get(
                    f"/v1/topics/{topic}/queues/0/messages",
                    params={"offset": 0, "wait_ms": 25_000},
                )
            )
            for _ in range(50)
        ]
        for _ in range(2000):
            if parked(live_server) >= before + 50:
                break
            await asyncio.sleep(0.02)
        sent = await client.post(
            f"/v1/topics/{topic}/messages", json={"body": "all", "queue_id": 0}
        )
        assert sent.status_code == 201
        responses = await asyncio.gather(*polls)
    assert all(r.status_code == 200 for r in responses)
    assert all([m["body"] for m in r.json()["messages"]] == ["all"] for r in responses)


def test_disconnected_client_leaves_no_waiter(
    live_server: LiveServer, client: httpx.Client, topic: str
) -> None:
    assert client.put(f"/v1/topics/{topic}", json={}).status_code == 201
    before = parked(live_server)
    sockets = [
        park_raw(live_server, f"/v1/topics/{topic}/queues/{q}/messages?wait_ms=30000")
        for q in range(3)
    ]
    wait_until(lambda: parked(live_server) == before + 3)
    for sock in sockets:
        sock.close()
    wait_until(lambda: parked(live_server) == before)
    assert (topic, 0) not in live_server.broker.waiters._by_key


def test_group_long_poll_wakes_on_any_queue(
    live_server: LiveServer, client: httpx.Client, topic: str, group: str
) -> None:
    assert (
        client.put(
            f"/v1/topics/{topic}", json={"read_queue_nums": 4, "write_queue_nums": 4}
        ).status_code
        == 201
    )
    before = parked(live_server)
    thread, result = in_thread(
        lambda: client.get(
            f"/v1/groups/{group}/topics/{topic}/messages", params={"wait_ms": 25_000}
        )
    )
    wait_until(lambda: parked(live_server) > before)
    assert (
        client.post(f"/v1/topics/{topic}/messages", json={"body": "q3", "queue_id": 3}).status_code
        == 201
    )
    thread.join(30)
    got = result[0].json()
    assert [(m["body"], m["queue_id"]) for m in got["messages"]] == [("q3", 3)]


def test_group_long_poll_hears_a_retry_topic_created_while_it_waits(
    live_server: LiveServer, client: httpx.Client, topic: str, group: str
) -> None:
    """A group pull reads ``%RETRY%<group>`` too: a message sent back while it waits, before
    the group had a retry topic, wakes it (the send-back creates the topic)."""
    send(client, topic, body="again")
    first = client.get(f"/v1/groups/{group}/topics/{topic}/messages", params={"auto_commit": True})
    [message] = first.json()["messages"]
    retry = f"%RETRY%{group}"
    assert client.get(f"/v1/topics/{retry}").status_code == 404
    before = parked(live_server)
    thread, result = in_thread(
        lambda: client.get(
            f"/v1/groups/{group}/topics/{topic}/messages",
            params={"wait_ms": 25_000, "auto_commit": True},
        )
    )
    wait_until(lambda: parked(live_server) > before)
    sent_back = client.post(
        f"/v1/groups/{group}/retry",
        json={"commit_log_offset": message["commit_log_offset"], "delay_level": 1},
    )
    assert sent_back.status_code == 200, sent_back.text
    assert sent_back.json()["topic"] == retry
    thread.join(30)
    got = result[0].json()
    assert [(m["body"], m["topic"], m["reconsume_times"]) for m in got["messages"]] == [
        ("again", topic, 1)
    ]
    assert retry in {q["topic"] for q in got["queues"]}


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[LiveServer]:
    live = start_server(tmp_path / "capped", max_parked_pulls=2)
    yield live
    live.stop()


def test_parked_cap_gives_429_with_retry_after(capped: LiveServer) -> None:
    client = capped.client()
    assert client.put("/v1/topics/Capped", json={}).status_code == 201
    sockets = [
        park_raw(capped, f"/v1/topics/Capped/queues/{q}/messages?wait_ms=30000") for q in range(2)
    ]
    wait_until(lambda: parked(capped) == 2)
    refused = client.get("/v1/topics/Capped/queues/3/messages", params={"wait_ms": 1000})
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "TOO_MANY_WAITERS"
    # A pull that finds data never parks, so the cap does not apply to it.
    client.post("/v1/topics/Capped/messages", json={"body": "x", "queue_id": 3})
    assert (
        client.get("/v1/topics/Capped/queues/3/messages", params={"wait_ms": 1000}).status_code
        == 200
    )
    for sock in sockets:
        sock.close()
    wait_until(lambda: parked(capped) == 0)
    assert "spoolmq_long_polls_rejected_total 1" in client.get("/metrics").text


def test_shutdown_answers_parked_long_polls(tmp_path: Path) -> None:
    live = start_server(tmp_path / "stopping")
    client = httpx.Client(base_url=live.url, timeout=40)
    client.put("/v1/topics/Stop", json={})
    thread, result = in_thread(
        lambda: client.get("/v1/topics/Stop/queues/0/messages", params={"wait_ms": 30_000})
    )
    wait_until(lambda: parked(live) == 1)
    live.stop()
    thread.join(30)
    assert result[0].status_code == 200
    assert result[0].json()["messages"] == []
    assert not (tmp_path / "stopping" / "abort").exists()
    client.close()
