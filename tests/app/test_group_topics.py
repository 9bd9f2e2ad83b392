"""A group's %RETRY% and %DLQ% topics are the broker's: a producer's send there is a 403
problem+json that writes nothing, while send-back still puts there."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from tests.conftest import LiveServer


def max_offset(live: LiveServer) -> int:
    return live.call(lambda: live.broker.store_gauges().commit_log_max_offset)


def test_producers_may_not_send_to_a_groups_topics(
    live_server: LiveServer, client: httpx.Client, topic: str, group: str
) -> None:
    sent = client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 0})
    assert sent.status_code == 201, sent.text
    msg_id = sent.json()["messages"][0]["msg_id"]
    back = client.post(f"/v1/groups/{group}/retry", json={"msg_id": msg_id, "delay_level": -1})
    assert back.status_code == 200 and back.json()["destination"] == "DLQ", back.text
    before = max_offset(live_server)
    for name in (f"%RETRY%{group}", f"%DLQ%{group}", f"%RETRY%{group}x", f"%DLQ%{group}x"):
        refused = client.post(
            f"/v1/topics/{quote(name, safe='')}/messages", json={"body": "sneaky", "queue_id": 0}
        )
        assert refused.status_code == 403, refused.text
        assert refused.headers["content-type"].startswith("application/problem+json")
        assert refused.json()["code"] == "SYSTEM_TOPIC"
        assert "retry or dead-letter topic" in refused.json()["detail"]
    assert max_offset(live_server) == before, "nothing written"
    assert client.get(f"/v1/topics/{quote(f'%DLQ%{group}x', safe='')}").status_code == 404
    dead = client.get(f"/v1/groups/{group}/dlq/messages").json()["messages"]
    assert [m["msg_id"] for m in dead] != [] and len(dead) == 1
