"""Timer cancels through the proxy (:mod:`app.proxy.timers`): each reaches the group holding
the message, named by the receipt's handle, and is answered with that ``broker_group``."""

from __future__ import annotations

import base64

import httpx

from tests.app.proxy.support import Cluster, create_topic, send


def handle_naming(broker: str, topic: str) -> str:
    text = f"v1 {topic} {broker} 4102444800000 UNKNOWNKEY"
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def test_a_cancel_reaches_the_group_holding_the_timer_message(cluster: Cluster) -> None:
    http, topic = cluster.http, "TimedProxied"
    route = create_topic(http, topic, queues=4)
    groups = {q["queue_id"]: q["group"] for q in route["queues"]}
    assert set(groups.values()) == {"g1", "g2"}
    sent = {q: send(http, topic, f"q{q}", queue_id=q, deliver_after_ms=600_000) for q in groups}
    for queue_id, receipt in sent.items():
        cancelled = http.delete(f"/v1/topics/{topic}/timers/{receipt['timer_handle']}")
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["outcome"] == "cancelled"
        assert cancelled.json()["uniq_key"] == receipt["uniq_key"]
        assert cancelled.json()["broker_group"] == groups[queue_id]

    brokers = {"g1": cluster.a, "g2": cluster.b}
    for queue_id, receipt in sent.items():  # the holding broker itself knows of the cancel
        holder = brokers[groups[queue_id]]
        url = f"{holder.url}/v1/topics/{topic}/timers/{receipt['timer_handle']}"
        assert httpx.delete(url, timeout=10).json()["outcome"] == "already_cancelled"


def test_a_handle_no_group_knows_is_refused_by_the_proxy(cluster: Cluster) -> None:
    http, topic = cluster.http, "TimedUnknown"
    create_topic(http, topic, queues=4)
    for handle in (handle_naming("nobody", topic), "not-a-handle", handle_naming("a", "Other")):
        refused = http.delete(f"/v1/topics/{topic}/timers/{handle}")
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "INVALID_TIMER_HANDLE"
    missing = http.delete(f"/v1/topics/{topic}/timers/{handle_naming('b', topic)}")
    assert missing.status_code == 404, "forwarded to group g2, which has no such message"
    assert missing.json()["code"] == "TIMER_NOT_FOUND"
