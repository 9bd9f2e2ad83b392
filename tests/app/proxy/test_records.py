"""Range reads through the proxy: a cluster-wide queue's records reach the client byte for
byte as its group's broker answered them, with their offset headers."""

from __future__ import annotations

import httpx

from tests.app.proxy.support import Cluster, create_topic, is_problem, send

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
