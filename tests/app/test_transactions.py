"""Transactional messages over HTTP: half send, commit and rollback (idempotent, also after a
restart), check-back polls, and the check-max topic after too many unanswered checks."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.auth_support import start_auth_server
from tests.conftest import LiveServer, start_server, wait_until

Json = dict[str, Any]

FAST_CHECKS: dict[str, Any] = {
    "transaction_timeout_ms": 100,
    "transaction_check_interval_ms": 200,
    "transaction_check_max": 2,
}
"""Check-back settings small enough for tests (RocketMQ's are 6 s, 30 s and 15)."""


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Checks far in the future: nothing is checked back behind a test's back."""
    live = start_server(
        tmp_path_factory.mktemp("store"),
        transaction_timeout_ms=600_000,
        transaction_check_interval_ms=600_000,
    )
    yield live
    live.stop()


def half(client: httpx.Client, topic: str, group: str = "pg", **message: Any) -> Json:
    message.setdefault("body", "order 42 paid")
    answer = client.post(
        f"/v1/topics/{topic}/transactions", json={"producer_group": group, "message": message}
    )
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def end(client: httpx.Client, transaction_id: str, how: str, group: str = "pg") -> httpx.Response:
    return client.post(f"/v1/transactions/{transaction_id}/{how}", json={"producer_group": group})


def pulled(client: httpx.Client, topic: str) -> list[Json]:
    """Every message visible in ``topic`` (it has 8 queues)."""
    found: list[Json] = []
    for queue_id in range(8):
        answer = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": 0})
        if answer.status_code == 200:
            found += answer.json()["messages"]
    return found


def test_a_half_message_is_invisible_until_committed_then_visible_once(
    client: httpx.Client, topic: str, group: str
) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"body": "plain"}).raise_for_status()
    sent = half(client, topic, keys=["order-42"], tags="paid", properties={"region": "eu"})
    assert sent["state"] == "open" and sent["topic"] == topic
    assert [m["body"] for m in pulled(client, topic)] == ["plain"]
    by_key = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-42"})
    assert by_key.json()["messages"] == []
    received = client.post(f"/v1/groups/{group}/topics/{topic}/receive", json={"max_messages": 8})
    assert [m["body"] for m in received.json()["messages"]] == ["plain"]

    committed = end(client, sent["transaction_id"], "commit")
    assert committed.status_code == 200, committed.text
    answer = committed.json()
    assert answer["state"] == "committed" and answer["repeated"] is False
    message = answer["message"]
    assert message["store_timestamp"] == sent["half"]["store_timestamp"]

    visible = [m for m in pulled(client, topic) if m["body"] == "order 42 paid"]
    assert len(visible) == 1
    assert visible[0]["msg_id"] == message["msg_id"]
    assert visible[0]["tags"] == "paid" and visible[0]["keys"] == ["order-42"]
    assert visible[0]["properties"]["region"] == "eu"
    assert visible[0]["properties"]["__transactionId__"] == sent["transaction_id"]
    assert "TRAN_MSG" not in visible[0]["properties"]
    assert visible[0]["store_timestamp"] == sent["half"]["store_timestamp"]
    by_key = client.get(f"/v1/topics/{topic}/messages", params={"key": "order-42"})
    assert [m["msg_id"] for m in by_key.json()["messages"]] == [message["msg_id"]]


def test_a_second_commit_answers_the_first_and_stores_nothing(
    client: httpx.Client, topic: str
) -> None:
    sent = half(client, topic)
    first = end(client, sent["transaction_id"], "commit").json()
    second = end(client, sent["transaction_id"], "commit")
    assert second.status_code == 200
    assert second.json()["repeated"] is True
    assert second.json()["message"] == first["message"]
    assert len(pulled(client, topic)) == 1
    refused = end(client, sent["transaction_id"], "rollback")
    assert refused.status_code == 409
    assert refused.json()["code"] == "TRANSACTION_ALREADY_ENDED"


def test_a_rollback_is_never_visible_and_refuses_a_later_commit(
    client: httpx.Client, topic: str
) -> None:
    sent = half(client, topic)
    rolled = end(client, sent["transaction_id"], "rollback")
    assert rolled.status_code == 200
    assert rolled.json() == {
        "transaction_id": sent["transaction_id"],
        "state": "rolled_back",
        "repeated": False,
        "message": None,
    }
    assert end(client, sent["transaction_id"], "rollback").json()["repeated"] is True
    refused = end(client, sent["transaction_id"], "commit")
    assert refused.status_code == 409
    assert pulled(client, topic) == []


def test_unknown_on_an_ended_transaction_is_refused_as_an_end_the_other_way_is(
    client: httpx.Client, topic: str
) -> None:
    committed, rolled_back, left_open = (
        half(client, topic),
        half(client, topic),
        half(client, topic),
    )
    end(client, committed["transaction_id"], "commit").raise_for_status()
    end(client, rolled_back["transaction_id"], "rollback").raise_for_status()
    for transaction, done in ((committed, "committed"), (rolled_back, "rolled back")):
        unknown = end(client, transaction["transaction_id"], "unknown")
        assert unknown.status_code == 409, unknown.text
        assert unknown.json()["code"] == "TRANSACTION_ALREADY_ENDED"
        assert f"already {done}" in unknown.json()["detail"]
    assert end(client, left_open["transaction_id"], "unknown").status_code == 204
    assert end(client, left_open["transaction_id"], "unknown", group="other").status_code == 403
    state = client.get(f"/v1/transactions/{left_open['transaction_id']}").json()["state"]
    assert state == "open"


def test_another_producer_group_cannot_end_it(client: httpx.Client, topic: str) -> None:
    sent = half(client, topic, group="owners")
    refused = end(client, sent["transaction_id"], "commit", group="strangers")
    assert refused.status_code == 403
    assert refused.json()["code"] == "PRODUCER_GROUP_MISMATCH"
    assert client.get(f"/v1/transactions/{sent['transaction_id']}").json()["state"] == "open"
    assert end(client, "0" * 32, "commit").json()["code"] == "TRANSACTION_NOT_FOUND"


def test_transaction_topics_refuse_direct_sends(client: httpx.Client) -> None:
    for topic in ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"):
        answer = client.post(f"/v1/topics/{topic}/messages", json={"body": "x"})
        assert answer.status_code == 403
        assert answer.json()["code"] == "SYSTEM_TOPIC"


def test_a_delayed_transactional_message_waits_for_the_commit(
    client: httpx.Client, topic: str
) -> None:
    sent = half(client, topic, delay_level=1)
    committed = end(client, sent["transaction_id"], "commit").json()
    assert committed["message"]["queue_offset"] == -1  # waiting in the delay topic
    assert committed["message"]["store_timestamp"] >= sent["half"]["store_timestamp"]
    wait_until(lambda: len(pulled(client, topic)) == 1)


def test_ends_are_remembered_across_a_restart(tmp_path: Path) -> None:
    topic = f"T_{uuid.uuid4().hex[:12]}"
    live = start_server(tmp_path, transaction_timeout_ms=600_000)
    try:
        client = live.client()
        committed, rolled, left_open = half(client, topic), half(client, topic), half(client, topic)
        first = end(client, committed["transaction_id"], "commit").json()
        end(client, rolled["transaction_id"], "rollback").raise_for_status()
    finally:
        live.stop()
    live = start_server(tmp_path, transaction_timeout_ms=600_000)
    try:
        client = live.client()
        again = end(client, committed["transaction_id"], "commit").json()
        assert again["repeated"] is True and again["message"] == first["message"]
        assert end(client, rolled["transaction_id"], "commit").status_code == 409
        listed = client.get("/v1/transactions", params={"producer_group": "pg"}).json()
        assert [t["transaction_id"] for t in listed["transactions"]] == [
            left_open["transaction_id"]
        ]
        end(client, left_open["transaction_id"], "commit").raise_for_status()
        assert len(pulled(client, topic)) == 2
    finally:
        live.stop()


def test_a_check_reaches_another_poller_of_the_group_which_commits(tmp_path: Path) -> None:
    topic = f"T_{uuid.uuid4().hex[:12]}"
    live = start_server(tmp_path, **{**FAST_CHECKS, "transaction_check_max": 15})
    try:
        client = live.client()
        sent = half(client, topic, group="orders")  # and its producer dies
        poll = client.post(
            "/v1/producer-groups/orders/transaction-checks",
            json={"wait_ms": 10_000, "lease_ms": 60_000},
        )
        assert poll.status_code == 200, poll.text
        checks = poll.json()["checks"]
        assert [c["transaction_id"] for c in checks] == [sent["transaction_id"]]
        assert checks[0]["checks"] >= 1
        # The half's coordinates are named as the half's; the message has none in its topic
        # before the commit, only the topic and queue it goes to.
        assert checks[0]["half"] == sent["half"]
        message = checks[0]["message"]
        assert (message["topic"], message["queue_id"]) == (topic, sent["queue_id"])
        assert message.keys().isdisjoint({"queue_offset", "commit_log_offset", "msg_id"})
        assert message["body"] == "order 42 paid"
        assert message["properties"]["PGROUP"] == "orders"
        assert message["properties"].keys().isdisjoint({"TRAN_MSG", "REAL_TOPIC", "REAL_QID"})
        others = client.post("/v1/producer-groups/other/transaction-checks", json={"wait_ms": 0})
        assert others.json()["checks"] == []
        end(client, sent["transaction_id"], "commit", group="orders").raise_for_status()
        assert [m["body"] for m in pulled(client, topic)] == ["order 42 paid"]
        state = client.get(f"/v1/transactions/{sent['transaction_id']}").json()
        assert state["state"] == "committed" and state["next_check_at"] is None
    finally:
        live.stop()


def test_a_group_that_never_answers_ends_in_the_check_max_topic(tmp_path: Path) -> None:
    topic = f"T_{uuid.uuid4().hex[:12]}"
    live = start_server(tmp_path, **FAST_CHECKS)
    try:
        client = live.client()
        sent = half(client, topic, group="silent")
        url = f"/v1/transactions/{sent['transaction_id']}"
        wait_until(lambda: client.get(url).json()["state"] == "gave_up")
        assert client.get(url).json()["checks"] == 2
        assert pulled(client, topic) == []
        copies = client.get(
            "/v1/topics/TRANS_CHECK_MAX_TIME_TOPIC/queues/0/messages", params={"offset": 0}
        ).json()["messages"]
        mine = [
            c for c in copies if c["properties"].get("__transactionId__") == sent["transaction_id"]
        ]
        assert len(mine) == 1
        assert mine[0]["properties"]["REAL_TOPIC"] == topic
        assert "IDEMPOTENCY_KEY" not in mine[0]["properties"]  # the copy's re-put key
        metrics = client.get("/metrics").text
        assert "spoolmq_transactions_gave_up_total 1" in metrics
        # An operator may still commit it.
        end(client, sent["transaction_id"], "commit", group="silent").raise_for_status()
        assert [m["body"] for m in pulled(client, topic)] == ["order 42 paid"]
    finally:
        live.stop()


def test_tokens_see_and_end_only_transactions_of_topics_they_produce_to(tmp_path: Path) -> None:
    secured = start_auth_server(tmp_path, **{**FAST_CHECKS, "transaction_check_max": 15})
    try:
        producer, stranger = secured.client("producer"), secured.client("stranger")
        mine = half(producer, "SecTx", group="shared")
        theirs = half(stranger, "OtherTx", group="shared")
        assert end(stranger, mine["transaction_id"], "commit", group="shared").status_code == 403
        assert stranger.get(f"/v1/transactions/{mine['transaction_id']}").status_code == 403
        polled = producer.post(
            "/v1/producer-groups/shared/transaction-checks", json={"wait_ms": 10_000}
        ).json()["checks"]
        assert [c["transaction_id"] for c in polled] == [mine["transaction_id"]]
        polled = stranger.post(
            "/v1/producer-groups/shared/transaction-checks", json={"wait_ms": 10_000}
        ).json()["checks"]
        assert [c["transaction_id"] for c in polled] == [theirs["transaction_id"]]
        ended = end(producer, mine["transaction_id"], "commit", group="shared")
        assert ended.status_code == 200
    finally:
        secured.stop()


def test_the_admin_page_lists_open_transactions_and_ends_them(
    client: httpx.Client, topic: str
) -> None:
    kept, dropped = half(client, topic, group="ops"), half(client, topic, group="ops")
    page = client.get("/admin/transactions")
    assert page.status_code == 200
    assert kept["transaction_id"] in page.text and dropped["transaction_id"] in page.text
    assert ">ops<" in page.text and topic in page.text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    for transaction, action in ((kept, "commit"), (dropped, "rollback")):
        ended = client.post(
            f"/admin/transactions/{transaction['transaction_id']}/{action}",
            data={"csrf_token": token.group(1)},
        )
        assert ended.status_code == 303, ended.text
    page = client.get("/admin/transactions")
    assert kept["transaction_id"] not in page.text
    assert dropped["transaction_id"] not in page.text
    assert [m["body"] for m in pulled(client, topic)] == ["order 42 paid"]
    assert client.get(f"/v1/transactions/{dropped['transaction_id']}").json()["state"] == (
        "rolled_back"
    )
