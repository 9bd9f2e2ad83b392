"""Range reads through the proxy: a cluster-wide queue's records reach the client byte for
byte as its group's broker answered them, with their offset headers; a long poll and a
group's filter are the broker's, their parameters passed on."""

from __future__ import annotations

import threading

import httpx

from tests.app.proxy.support import Cluster, create_topic, is_problem, send
from tests.conftest import wait_until

HEADERS = (
    "spoolmq-status",
    "spoolmq-next-offset",
    "spoolmq-min-offset",
    "spoolmq-max-offset",
    "spoolmq-record-count",
)


def test_a_range_read_is_passed_on_as_the_groups_broker_answered_it(cluster: Cluster) -> None:
    create_topic(cluster.http, "Ranged")  # queues 4-7 are g2's 0-3
    for i in range(5):
        send(cluster.http, "Ranged", f"m{i}", queue_id=5)
    params = {"offset": 1, "max_bytes": 1 << 20}
    through = cluster.http.get("/v1/topics/Ranged/queues/5/records", params=params)
    direct = httpx.get(f"{cluster.b.url}/v1/topics/Ranged/queues/1/records", params=params)
    assert through.status_code == direct.status_code == 200, through.text
    assert through.headers["content-type"] == "application/vnd.spoolmq.commitlog-records"
    assert through.content == direct.content and len(through.content) > 0
    assert [through.headers[h] for h in HEADERS] == ["FOUND", "5", "0", "5", "4"]
    assert [through.headers[h] for h in HEADERS] == [direct.headers[h] for h in HEADERS]


def test_a_range_read_of_a_queue_the_topic_lacks_is_a_problem(cluster: Cluster) -> None:
    create_topic(cluster.http, "Ranged")
    answer = cluster.http.get("/v1/topics/Ranged/queues/8/records")
    is_problem(answer, 404, "QUEUE_NOT_FOUND")


def test_a_long_poll_and_a_groups_filter_reach_the_groups_broker(cluster: Cluster) -> None:
    create_topic(cluster.http, "Waited")  # queue 5 is g2's 1
    group = cluster.http.put("/v1/groups/Europe", json={"filters": {"Waited": "region = 'eu'"}})
    assert group.status_code in (200, 201), group.text
    send(cluster.http, "Waited", "us-0", queue_id=5, properties={"region": "us"})
    parked = cluster.b.broker.waiters.parked
    answers: list[httpx.Response] = []
    params: dict[str, str | int] = {"offset": 0, "group": "Europe", "wait_ms": 25_000}
    with httpx.Client(base_url=cluster.proxy.url, timeout=40) as other:
        waiting = threading.Thread(
            target=lambda: answers.append(
                other.get("/v1/topics/Waited/queues/5/records", params=params)
            )
        )
        waiting.start()
        wait_until(lambda: cluster.b.broker.waiters.parked > parked)  # past us-0, parked
        send(cluster.http, "Waited", "us-1", queue_id=5, properties={"region": "us"})
        send(cluster.http, "Waited", "eu-2", queue_id=5, properties={"region": "eu"})
        waiting.join(30)
    [answer] = answers
    assert answer.status_code == 200, answer.text
    assert [answer.headers[h] for h in HEADERS] == ["FOUND", "3", "0", "3", "1"]
    assert b"eu-2" in answer.content and b"us-" not in answer.content
