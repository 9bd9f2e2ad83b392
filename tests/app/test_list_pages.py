"""Every list answers a page: ``limit`` and ``after`` in, ``total`` and
``next_after`` out, and walking the pages lists each item once."""

from __future__ import annotations

import httpx
import pytest


def walk(client: httpx.Client, path: str, key: str, limit: int) -> tuple[list[str], set[int]]:
    """Every name over every page, and the totals the pages reported."""
    names: list[str] = []
    totals: set[int] = set()
    after: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": limit}
        if after is not None:
            params["after"] = after
        answer = client.get(path, params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert len(page[key]) <= limit
        names += [item["topic" if key == "topics" else "group"] for item in page[key]]
        totals.add(page["total"])
        after = page["next_after"]
        if after is None:
            return names, totals


def test_topics_and_groups_are_listed_page_by_page(client: httpx.Client, topic: str) -> None:
    created = [f"{topic}-{n:02d}" for n in range(7)]
    groups = [f"G{topic}-{n:02d}" for n in range(5)]
    for name in created:
        assert client.put(f"/v1/topics/{name}", json={"write_queue_nums": 1}).status_code == 201
    for name in groups:
        assert client.put(f"/v1/groups/{name}", json={}).status_code in (200, 201)
    everything = client.get("/v1/topics", params={"limit": 1000}).json()
    names, totals = walk(client, "/v1/topics", "topics", 3)
    assert names == sorted(names) and len(names) == len(set(names)) == everything["total"]
    assert set(created) <= set(names) and totals == {everything["total"]}
    page = client.get("/v1/topics", params={"limit": 2, "after": created[2]}).json()
    assert [t["topic"] for t in page["topics"]] == created[3:5]
    assert page["next_after"] == created[4]
    group_names, _ = walk(client, "/v1/groups", "groups", 2)
    assert set(groups) <= set(group_names) and group_names == sorted(group_names)


@pytest.mark.parametrize("limit", ["0", "1001", "x"])
def test_a_limit_out_of_range_is_a_validation_problem(client: httpx.Client, limit: str) -> None:
    answer = client.get("/v1/topics", params={"limit": limit})
    assert answer.status_code == 422
    assert answer.json()["code"] == "VALIDATION_FAILED"


def test_a_groups_messages_in_flight_are_listed_page_by_page(
    client: httpx.Client, topic: str, group: str
) -> None:
    other = f"{topic}-b"
    for name in (topic, other):
        assert client.put(f"/v1/topics/{name}", json={"write_queue_nums": 2}).status_code == 201
        for queue_id in (0, 1):
            batch = {"messages": [{"body": f"m{n}"} for n in range(3)], "queue_id": queue_id}
            assert client.post(f"/v1/topics/{name}/messages", json=batch).status_code == 201
        got = client.post(f"/v1/groups/{group}/topics/{name}/receive", json={"max_messages": 6})
        assert len(got.json()["messages"]) == 6
    handles = {
        (m["topic"], m["queue_id"], m["queue_offset"]): m["receipt_handle"]
        for m in got.json()["messages"]
    }
    first = client.get(f"/v1/groups/{group}/in-flight", params={"limit": 5}).json()
    assert first["group"] == group and first["total"] == 12
    keys = [(m["topic"], m["queue_id"], m["offset"]) for m in first["messages"]]
    assert keys == sorted(keys) and keys[0] == (topic, 0, 0)
    assert {m["delivery_attempt"] for m in first["messages"]} == {1}
    assert first["next_after"] == f"{topic}:1:1"
    acked = sorted(handles)[:2]  # both in the next page's range: acked, not listed again
    answer = client.post(
        f"/v1/groups/{group}/acks", json={"receipt_handles": [handles[k] for k in acked]}
    )
    assert [r["outcome"] for r in answer.json()["results"]] == ["acked", "acked"]
    after = first["next_after"]
    while after is not None:
        page = client.get(
            f"/v1/groups/{group}/in-flight", params={"limit": 5, "after": after}
        ).json()
        assert page["total"] == 10
        keys += [(m["topic"], m["queue_id"], m["offset"]) for m in page["messages"]]
        after = page["next_after"]
    expected = [(t, q, o) for t in (topic, other) for q in (0, 1) for o in range(3)]
    assert keys == [k for k in expected if k not in acked]


@pytest.mark.parametrize("after", ["x", "T:1", "T:q:1", "T/x:1:1", ":1:1"])
def test_a_malformed_in_flight_cursor_is_a_validation_problem(
    client: httpx.Client, group: str, after: str
) -> None:
    assert client.put(f"/v1/groups/{group}", json={}).status_code in (200, 201)
    answer = client.get(f"/v1/groups/{group}/in-flight", params={"after": after})
    assert answer.status_code == 422
    assert answer.json()["code"] == "VALIDATION_FAILED"


def test_the_in_flight_list_of_an_unknown_group_is_not_found(client: httpx.Client) -> None:
    answer = client.get("/v1/groups/NoSuchGroup-in-flight/in-flight")
    assert answer.status_code == 404
    assert answer.json()["code"] == "GROUP_NOT_FOUND"
