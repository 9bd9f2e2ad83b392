"""A group pull with ``auto_commit``, or a POP receive, that one broker group delivers and another
refuses (for a reason of its own: its copy of the topic is not readable) answers what was
delivered: the delivering broker committed (or hid) it, so an answer of the refusal alone would
lose those messages (or hide them for nothing).

Real etcd, real brokers, the proxy on uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.test_proxy import Cluster, create_topic, send, two_groups


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


def readable_on_b(cluster: Cluster, topic: str, readable: bool) -> None:
    perm = 6 if readable else 2  # 2: write only
    answer = httpx.put(
        f"{cluster.b.url}/v1/topics/{topic}",
        json={"write_queue_nums": 2, "read_queue_nums": 2, "perm": perm},
        timeout=10,
    )
    assert answer.status_code in (200, 201), answer.text


def test_an_auto_commit_pull_one_group_refuses_still_delivers_the_other_groups(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Half", 4)  # queues 0, 1 on g1; 2, 3 on g2
    assert http.put("/v1/groups/Readers", json={}).status_code in (200, 201)
    send(http, "Half", "on-g1", queue_id=0)
    readable_on_b(cluster, "Half", readable=False)
    params: dict[str, str | int] = {"auto_commit": "true", "max_messages": 8}
    pulled = http.get("/v1/groups/Readers/topics/Half/messages", params=params)
    readable_on_b(cluster, "Half", readable=True)
    delivered = [m["body"] for m in pulled.json().get("messages", [])]
    again = http.get("/v1/groups/Readers/topics/Half/messages", params=params)
    assert again.status_code == 200, again.text
    delivered += [m["body"] for m in again.json()["messages"]]
    assert delivered == ["on-g1"], (pulled.status_code, pulled.text)


def test_a_receive_one_group_refuses_still_answers_what_the_other_popped(
    cluster: Cluster,
) -> None:
    """Otherwise what g1 popped stays invisible, for nobody, until its invisibility ends."""
    http = cluster.http
    create_topic(http, "HalfPop", 4)
    send(http, "HalfPop", "on-g1", queue_id=1)
    readable_on_b(cluster, "HalfPop", readable=False)
    received = http.post("/v1/groups/Poppers/topics/HalfPop/receive", json={"max_messages": 8})
    readable_on_b(cluster, "HalfPop", readable=True)
    assert received.status_code == 200, received.text
    assert [m["body"] for m in received.json()["messages"]] == ["on-g1"]
