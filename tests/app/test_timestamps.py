"""Every route that takes a point in time takes epoch ms and ISO 8601 alike (one parser)."""

from __future__ import annotations

import httpx

MAY_1 = 1714521600000  # 2024-05-01T00:00:00Z


def test_offset_by_time_takes_epoch_ms_and_iso_8601(client: httpx.Client, topic: str) -> None:
    assert client.post(f"/v1/topics/{topic}/messages", json={"body": "x"}).status_code == 201
    answers = [
        client.get(f"/v1/topics/{topic}/queues/0/offset", params={"timestamp": when}).json()
        for when in (str(MAY_1), "2024-05-01T00:00:00Z", "2024-05-01T02:00:00+02:00")
    ]
    assert [a["timestamp"] for a in answers] == [MAY_1] * 3
    assert answers[0] == answers[1] == answers[2]


def test_a_time_that_cannot_be_read_is_a_422_saying_what_is_accepted(
    client: httpx.Client, topic: str
) -> None:
    response = client.get(f"/v1/topics/{topic}/queues/0/offset", params={"timestamp": "soon"})
    assert response.status_code == 422
    assert "epoch milliseconds or ISO 8601" in response.json()["detail"]


def test_json_bodies_take_iso_8601_too(client: httpx.Client, topic: str, group: str) -> None:
    assert client.post(f"/v1/topics/{topic}/messages", json={"body": "x"}).status_code == 201
    body = {"consume_from": "timestamp", "consume_from_timestamp": "2024-05-01T00:00:00Z"}
    created = client.put(f"/v1/groups/{group}", json=body)
    assert created.status_code == 201, created.text
    assert created.json()["consume_from_timestamp"] == MAY_1
    reset = {"to": "timestamp", "timestamp": "2024-05-01", "topic": topic, "dry_run": True}
    by_text = client.post(f"/v1/groups/{group}/offsets/reset", json=reset)
    by_number = client.post(f"/v1/groups/{group}/offsets/reset", json={**reset, "timestamp": MAY_1})
    assert by_text.status_code == 200, by_text.text
    assert by_text.json() == by_number.json()
    found = client.get(
        f"/v1/topics/{topic}/messages",
        params={"key": "nothing", "begin_timestamp": "2024-05-01T00:00:00Z"},
    )
    assert found.status_code == 200, found.text
