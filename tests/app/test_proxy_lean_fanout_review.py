"""The lean lane's first round of a group pull or POP receive (app.proxy.lean_fanout) against
the endpoint's way, at its edges: bad input, the rotation of the groups, what the lane takes
from the upstream pool, and a round whose answer is lost.

Real etcd, real brokers, the proxy on uvicorn in this process (its pool is looked at directly:
a slot not given back shows nowhere else until all of them are gone)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.test_proxy import Cluster, create_topic, two_groups


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


def fill_both_groups(http: httpx.Client, topic: str, each: int) -> None:
    """``topic`` on both groups (g1 hosts 0, 1; g2 hosts 2, 3), ``each`` messages in each."""
    create_topic(http, topic, 4)
    for i in range(each):
        for queue_id in (0, 2):
            sent = http.post(
                f"/v1/topics/{topic}/messages",
                json={"body": f"{queue_id}-{i}", "queue_id": queue_id},
            )
            assert sent.status_code == 201, sent.text


def test_a_group_pull_of_a_negative_max_messages_is_the_brokers_refusal(cluster: Cluster) -> None:
    """The endpoint's way passes a budget under 1 to a broker, which says what is wrong with
    it (422); the lane's shares of -1 among two groups are one message of the first."""
    http = cluster.http
    fill_both_groups(http, "Neg", 2)
    for _ in range(2):  # both brokers' connections warm, idle
        warm = http.get("/v1/groups/W/topics/Neg/messages", params={"max_messages": 4})
        assert warm.status_code == 200, warm.text

    answer = http.get("/v1/groups/N/topics/Neg/messages", params={"max_messages": -1})

    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
