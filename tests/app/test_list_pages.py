"""Every list of names answers a page: ``limit`` and ``after`` in, ``total`` and
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
