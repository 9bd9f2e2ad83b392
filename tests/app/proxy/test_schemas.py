"""What the proxy's document declares (:mod:`app.proxy.schemas`): the brokers' request models
for the bodies and queries it forwards, and answer models that are what a live proxy answers —
each checked here against real answers of a proxy in front of two broker groups."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from app.proxy.schemas import (
    BODY_MODELS,
    ClusterCheckPollOut,
    ClusterEndOut,
    ClusterGroupPullResponse,
    ClusterOffsetBatchIn,
    ClusterOffsetCommitResponse,
    ClusterSendResponse,
    ClusterTimerCancelOut,
    ClusterTopicDetailOut,
    ClusterTopicIn,
    ClusterTopicRouteOut,
    ClusterTransactionListOut,
    ClusterTransactionOut,
    ProxyHealthOut,
    forwarded_body,
    forwarded_query,
)
from app.schemas import GroupIn, PullQuery, RawSendQuery
from tests.app.proxy.support import Cluster, create_topic


def test_a_forwarded_body_names_its_model_and_only_a_declared_one() -> None:
    extra = forwarded_body(GroupIn, "A group config.")
    body = extra["requestBody"]
    assert body["required"] is True
    assert body["description"] == "A group config."
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/GroupIn"}
    assert ClusterOffsetBatchIn in BODY_MODELS
    with pytest.raises(AssertionError, match="BODY_MODELS"):
        forwarded_body(PullQuery)


def test_a_forwarded_query_is_the_brokers_parameters_by_their_names() -> None:
    raw = {p["name"]: p for p in forwarded_query(RawSendQuery)}
    assert "property" in raw and "properties" not in raw  # the name a client writes
    assert raw["queue_id"]["in"] == "query" and raw["queue_id"]["required"] is False
    pull = {p["name"]: p for p in forwarded_query(PullQuery)}
    assert pull["wait_ms"]["schema"]["maximum"] == 30000
    assert pull["max_messages"]["description"].startswith("Most messages")


def test_a_topic_over_groups_takes_more_queues_than_one_broker_and_names_groups() -> None:
    topic = ClusterTopicIn.model_validate({"write_queue_nums": 2048, "groups": ["g1", "g2"]})
    assert topic.write_queue_nums == 2048 and topic.groups == ["g1", "g2"]
    assert ClusterTopicIn.model_validate({"write_queue_nums": 4.0}).write_queue_nums == 4
    wrongs: list[dict[str, Any]] = [
        {"groups": []},
        {"write_queue_nums": 0},
        {"queues": 1},
        {"order": "yes"},
    ]
    for wrong in wrongs:
        with pytest.raises(ValidationError):
            ClusterTopicIn.model_validate(wrong)


def test_a_commit_names_a_cluster_wide_queue_and_may_name_its_group() -> None:
    batch = ClusterOffsetBatchIn.model_validate(
        {
            "offsets": [
                {"topic": "T", "queue_id": 5000, "offset": 3},
                {"topic": "%RETRY%G", "queue_id": 0, "offset": 1, "broker_group": "g2"},
            ]
        }
    )
    assert [o.broker_group for o in batch.offsets] == [None, "g2"]
    answer = ClusterOffsetCommitResponse.model_json_schema(mode="serialization")
    item = answer["$defs"]["ClusterCommittedOffsetOut"]
    assert "broker_group" not in item["required"]  # the commit's own, when it named one


# ================================================================ what a live proxy answers


def answered(model: type[BaseModel], answer: Any, status: int = 200) -> Any:
    """``answer``'s JSON, which must be ``status`` and an instance of ``model`` exactly:
    every field the model requires, none it does not know."""
    assert answer.status_code == status, answer.text
    data = answer.json()
    model.model_validate(data)
    known = set(model.model_json_schema(mode="serialization")["properties"])
    assert set(data) <= known, set(data) - known
    return data


def test_the_proxys_answers_are_its_models(cluster: Cluster) -> None:
    http = cluster.http
    route = answered(
        ClusterTopicRouteOut, http.put("/v1/topics/Modelled", json={"write_queue_nums": 4}), 201
    )
    assert {q["group"] for q in route["queues"]} == {"g1", "g2"}
    answered(ClusterTopicRouteOut, http.get("/v1/topics/Modelled/route"))
    detail = answered(ClusterTopicDetailOut, http.get("/v1/topics/Modelled"))
    assert [q["queue_id"] for q in detail["queues"]] == [0, 1, 2, 3]
    assert {q["broker_group"] for q in detail["queues"]} == {"g1", "g2"}
    health = answered(ProxyHealthOut, http.get("/healthz"))
    assert set(health["masters"]) == {"g1", "g2"}

    sent = answered(
        ClusterSendResponse,
        http.post("/v1/topics/Modelled/messages", json={"body": "m", "queue_id": 3}),
        201,
    )
    assert (sent["broker_group"], sent["messages"][0]["queue_id"]) == ("g2", 3)
    pulled = answered(ClusterGroupPullResponse, http.get("/v1/groups/G/topics/Modelled/messages"))
    assert [(m["queue_id"], m["broker_group"]) for m in pulled["messages"]] == [(3, "g2")]
    commit = {"offsets": [{"topic": "Modelled", "queue_id": 3, "offset": 1}]}
    answered(ClusterOffsetCommitResponse, http.post("/v1/groups/G/offsets", json=commit))

    timed = http.post(
        "/v1/topics/Modelled/messages", json={"body": "t", "deliver_after_ms": 600_000}
    )
    handle = timed.json()["messages"][0]["timer_handle"]
    cancelled = answered(ClusterTimerCancelOut, http.delete(f"/v1/topics/Modelled/timers/{handle}"))
    assert cancelled["broker_group"] == timed.json()["broker_group"]


def test_transactions_through_the_proxy_are_its_models(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Modelled", 4)
    half = answered(
        ClusterTransactionOut,
        http.post(
            "/v1/topics/Modelled/transactions",
            json={"producer_group": "P", "message": {"body": "h", "queue_id": 2.0}},
        ),
        201,
    )
    assert half["transaction_id"].startswith(half["broker_group"] + "~")
    assert half["queue_id"] == 2
    transaction = f"/v1/transactions/{half['transaction_id']}"
    answered(ClusterTransactionOut, http.get(transaction))
    waiting = answered(ClusterTransactionListOut, http.get("/v1/transactions"))
    assert [t["transaction_id"] for t in waiting["transactions"]] == [half["transaction_id"]]
    checks = answered(
        ClusterCheckPollOut, http.post("/v1/producer-groups/P/transaction-checks", json={})
    )
    assert checks["checks"] == []
    ended = answered(
        ClusterEndOut, http.post(f"{transaction}/commit", json={"producer_group": "P"})
    )
    assert ended["broker_group"] == half["broker_group"]
