"""Every GetMessageStatus a pull can answer, over HTTP.

The rare ones need a store whose files have gone (expired CommitLog or ConsumeQueue files):
the test removes files on the server's own event loop, as a cleaner would, then pulls.
NO_MATCHED_LOGIC_QUEUE never reaches a client: a pull names a queue the topic declares, and a
declared queue no message has reached yet is NO_MESSAGE_IN_QUEUE (as in RocketMQ, which
creates the ConsumeQueue on demand).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from storage import MessageStore
from storage.consume_queue import ConsumeQueue
from tests.conftest import LiveServer, start_server, wait_until


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """64 KiB CommitLog files and 16-unit ConsumeQueue files."""
    live = start_server(
        Path(tmp_path_factory.mktemp("tiny")),
        commit_log_file_size=64 * 1024,
        consume_queue_units_per_file=16,
    )
    yield live
    live.stop()


def pull(client: httpx.Client, topic: str, queue_id: int = 0, **params: Any) -> dict[str, Any]:
    response = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params=params)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def store_of(live: LiveServer) -> MessageStore:
    """The server's store, private to its broker: only these tests play the cleaner."""
    store = live.broker._store
    assert store is not None
    return store


def queue_of(live: LiveServer, topic: str) -> ConsumeQueue:
    queue = store_of(live).find_consume_queue(topic, 0)
    assert queue is not None
    return queue


def send_many(client: httpx.Client, topic: str, count: int, size: int) -> None:
    for _ in range(0, count, 10):
        part = {"messages": [{"body": "x" * size} for _ in range(10)], "queue_id": 0}
        assert client.post(f"/v1/topics/{topic}/messages", json=part).status_code == 201


def test_statuses_of_a_healthy_queue(client: httpx.Client, topic: str) -> None:
    assert client.put(f"/v1/topics/{topic}", json={}).status_code == 201
    assert pull(client, topic, offset=0)["status"] == "NO_MESSAGE_IN_QUEUE"
    moved = pull(client, topic, offset=5)
    assert (moved["status"], moved["next_offset"]) == ("NO_MESSAGE_IN_QUEUE", 0)
    for tags in ("A", "B", "C"):
        client.post(
            f"/v1/topics/{topic}/messages", json={"body": tags, "tags": tags, "queue_id": 0}
        )
    assert pull(client, topic, offset=0)["status"] == "FOUND"
    assert pull(client, topic, offset=0, tags="Z")["status"] == "NO_MATCHED_MESSAGE"
    one = pull(client, topic, offset=3)
    assert (one["status"], one["next_offset"], one["messages"]) == ("OFFSET_OVERFLOW_ONE", 3, [])
    badly = pull(client, topic, offset=99)
    assert (badly["status"], badly["next_offset"]) == ("OFFSET_OVERFLOW_BADLY", 0)


def test_no_message_in_queue(live_server: LiveServer, client: httpx.Client, topic: str) -> None:
    assert client.put(f"/v1/topics/{topic}", json={}).status_code == 201
    client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 0})
    # Queue 1 has no ConsumeQueue yet; queue 2's exists but holds nothing (as after its
    # files were cleaned up): both are simply empty.
    live_server.call(lambda: store_of(live_server).find_consume_queue(topic, 2, create=True))
    for queue_id in (1, 2):
        got = pull(client, topic, queue_id, offset=0)
        assert (got["status"], got["max_offset"], got["next_offset"]) == (
            "NO_MESSAGE_IN_QUEUE",
            0,
            0,
        )


def test_statuses_after_files_expire(tiny: LiveServer) -> None:
    client = tiny.client()
    send_many(client, "Expiring", 40, 2000)  # about 86 KB: two CommitLog files
    send_many(client, "Indexed", 40, 10)  # three ConsumeQueue files of 16 units
    store = store_of(tiny)
    assert tiny.call(lambda: len(store.commit_log.queue.files)) >= 2

    # The oldest CommitLog file is gone but the ConsumeQueue still points into it.
    tiny.call(lambda: store.commit_log.queue.delete_first_files(1))
    removing = pull(client, "Expiring", offset=0)
    assert removing["status"] == "MESSAGE_WAS_REMOVING"
    assert removing["messages"] == []

    # Once the cleaner has dropped the queue's expired files and moved its min offset,
    # offset 0 is too small.
    def clean() -> None:
        queue = queue_of(tiny, "Expiring")
        queue.delete_expired_files(store.commit_log.min_offset)
        queue.correct_min_offset(store.commit_log.min_offset)

    tiny.call(clean)
    small = pull(client, "Expiring", offset=0)
    assert small["status"] == "OFFSET_TOO_SMALL"
    assert small["next_offset"] == small["min_offset"] > 0
    assert pull(client, "Expiring", offset=small["next_offset"])["status"] == "FOUND"

    # A ConsumeQueue file is gone while the min offset still covers it.
    tiny.call(lambda: queue_of(tiny, "Indexed").queue.delete_first_files(1))
    null = pull(client, "Indexed", offset=0)
    assert (null["status"], null["next_offset"]) == ("OFFSET_FOUND_NULL", 16)
    assert pull(client, "Indexed", offset=16)["status"] == "FOUND"


def test_group_pull_corrects_an_expired_position(tiny: LiveServer) -> None:
    client = tiny.client()
    send_many(client, "Regrouped", 10, 10)
    store = store_of(tiny)
    min_offset = pull(client, "Regrouped", offset=0)["min_offset"]
    tiny.call(lambda: queue_of(tiny, "Regrouped").correct_min_offset(store.commit_log.max_offset))
    assert pull(client, "Regrouped", offset=0)["status"] == "OFFSET_TOO_SMALL"
    assert (
        client.put("/v1/groups/g/topics/Regrouped/queues/0/offset", json={"offset": 0}).status_code
        == 200
    )
    got = client.get("/v1/groups/g/topics/Regrouped/messages").json()
    queue0 = next(q for q in got["queues"] if q["queue_id"] == 0)
    assert queue0["offset"] == queue0["next_offset"] == 10 != min_offset
    offsets = client.get("/v1/groups/g/offsets", params={"topic": "Regrouped"}).json()
    assert offsets["topics"][0]["queues"][0]["committed_offset"] == 10


def test_offset_found_null_parks_a_long_poll_until_an_arrival(tiny: LiveServer) -> None:
    client = tiny.client()
    send_many(client, "Gapped", 20, 10)  # two ConsumeQueue files of 16 units
    tiny.call(lambda: queue_of(tiny, "Gapped").queue.delete_first_files(1))
    answer: dict[str, Any] = {}

    def long_poll() -> None:
        with httpx.Client(base_url=tiny.url, timeout=60) as own:
            answer.update(pull(own, "Gapped", offset=0, wait_ms=25_000))

    thread = threading.Thread(target=long_poll, daemon=True)
    thread.start()
    wait_until(lambda: tiny.broker.waiters.parked == 1)
    send_many(client, "Gapped", 10, 10)
    thread.join(timeout=60)
    assert (answer["status"], answer["next_offset"], answer["messages"]) == (
        "OFFSET_FOUND_NULL",
        16,
        [],
    )
