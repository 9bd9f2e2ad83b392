"""A client's mistake in what a send names is answered 4xx by the proxy, never 500: a queue id or
sharding key of the wrong JSON type (a list, an object), a batch's ``messages`` that is no list.

Real etcd, real brokers, the proxy on uvicorn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.test_proxy import Cluster, create_topic, local_queue_counts, two_groups


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


MISTAKES: list[dict[str, Any]] = [
    {"body": "x", "queue_id": [1]},
    {"body": "x", "queue_id": {"a": 1}},
    {"body": "x", "sharding_key": ["k"]},
    {"body": "x", "sharding_key": {"k": 1}},
    {"messages": [{"body": "a", "queue_id": [0]}]},
    {"messages": [{"body": "a", "sharding_key": {}}]},
    {"messages": 5, "queue_id": 1},
    {"messages": True, "sharding_key": "k"},
]


def test_a_send_naming_its_queue_wrongly_is_a_client_error(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Mistakes", 4)
    for mistake in MISTAKES:
        answer = http.post("/v1/topics/Mistakes/messages", json=mistake)
        assert 400 <= answer.status_code < 500, (mistake, answer.status_code, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
    assert all(
        max(local_queue_counts(live, "Mistakes").values()) == 0 for live in (cluster.a, cluster.b)
    )


def test_a_list_limit_that_is_no_whole_number_is_a_client_error(cluster: Cluster) -> None:
    http = cluster.http
    for limit in ("²", "1²", "x", "0", "-1"):  # "²".isdigit(), but int("²") fails
        answer = http.get("/v1/topics", params={"limit": limit})
        assert (answer.status_code, answer.json()["code"]) == (422, "VALIDATION_FAILED"), limit


def test_a_half_send_naming_its_queue_wrongly_is_refused_not_placed_elsewhere(
    cluster: Cluster,
) -> None:
    """As a send's: the broker would refuse these, so the proxy must not replace them."""
    http = cluster.http
    create_topic(http, "HalfMistakes", 4)
    for named in ({"queue_id": "2"}, {"queue_id": True}, {"queue_id": -1}, {"sharding_key": 5}):
        message = {"body": "x", **named}
        answer = http.post(
            "/v1/topics/HalfMistakes/transactions",
            json={"producer_group": "P", "message": message},
        )
        assert answer.status_code == 422, (named, answer.status_code, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")


def test_a_queue_id_too_long_for_a_number_is_a_client_error(cluster: Cluster) -> None:
    """Python's int() refuses a string of more than 4300 digits (ValueError)."""
    http = cluster.http
    create_topic(http, "LongIds", 4)
    answer = http.get(f"/v1/topics/LongIds/queues/{'9' * 5000}/messages")
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:300])
