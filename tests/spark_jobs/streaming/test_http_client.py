"""The source's and sink's HTTP client against a real server: reads, keyed sends and their
replays, every refusal mapped to a clear error, retries with the same key, and a broker
that does not answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.errors import (
    AuthenticationError,
    BrokerUnavailableError,
    IdempotencyKeyReusedError,
    OutcomeUnknownError,
    PermissionDeniedError,
    UnknownTopicError,
)
from spark_jobs.streaming.http_client import SpoolmqClient
from spark_jobs.streaming.options import Connection, RetryPolicy
from tests.app.auth_support import start_auth_server
from tests.conftest import LiveServer
from tests.spark_jobs.stub_server import stub_server

FAST = RetryPolicy(retries=2, backoff_ms=1, max_backoff_ms=1, timeout_s=5)


def connect(
    *urls: str, token: str | None = None, slept: list[float] | None = None
) -> SpoolmqClient:
    sleep = slept.append if slept is not None else (lambda _: None)
    return SpoolmqClient(Connection(tuple(urls), token, FAST), sleep=sleep)


def test_reads_queues_offsets_and_pulls(live_server: LiveServer, topic: str) -> None:
    http = live_server.client()
    assert (
        http.put(
            f"/v1/topics/{topic}", json={"write_queue_nums": 3, "read_queue_nums": 3}
        ).status_code
        == 201
    )
    for i in range(5):
        http.post(f"/v1/topics/{topic}/messages", json={"body": f"m{i}", "queue_id": 1})
    with connect(live_server.url) as client:
        queues = client.queues(topic)
        assert [(q.queue_id, q.min_offset, q.max_offset, q.broker_group) for q in queues] == [
            (0, 0, 0, None), (1, 0, 5, None), (2, 0, 0, None),
        ]  # fmt: skip
        assert topic in client.topic_names()
        assert not any(name.startswith("%") for name in client.topic_names())
        assert client.offset_for_time(topic, 1, 0) == 0
        assert client.offset_for_time(topic, 1, 2**50) == 5
        pulled = client.pull(topic, 1, 3, 10, None)
        assert [m["queue_offset"] for m in pulled["messages"]] == [3, 4]
        assert pulled["messages"][0]["body_encoding"] == "base64"
        with pytest.raises(UnknownTopicError, match="no such topic"):
            client.queues("NoSuchTopic")


def test_a_keyed_send_is_stored_once_and_its_key_cannot_carry_other_rows(
    live_server: LiveServer, topic: str
) -> None:
    batch = {"messages": [{"body": "a"}, {"body": "b"}], "sharding_key": "k1"}
    with connect(live_server.url) as client:
        first = client.send(topic, batch, "spark:q:0:0:0")
        again = client.send(topic, batch, "spark:q:0:0:0")
        assert (first.replayed, again.replayed) == (False, True)
        assert again.receipts == first.receipts
        with pytest.raises(IdempotencyKeyReusedError, match="rowOrder=sorted"):
            client.send(topic, {"messages": [{"body": "c"}]}, "spark:q:0:0:0")
        assert sum(q.max_offset for q in client.queues(topic)) == 2


def test_a_bad_token_and_a_missing_permission_fail_at_once(tmp_path: Path) -> None:
    server = start_auth_server(tmp_path)
    try:
        slept: list[float] = []
        with (
            connect(server.url, token="not-a-token", slept=slept) as client,
            pytest.raises(AuthenticationError, match="SPOOLMQ_TOKEN"),
        ):
            client.queues("SecOrders")
        with (
            connect(server.url, token=server.tokens["stranger"], slept=slept) as client,
            pytest.raises(PermissionDeniedError, match="403"),
        ):
            client.send("SecOrders", {"messages": [{"body": "x"}]}, "k")
        assert slept == []  # a 4xx is not retried
    finally:
        server.stop()


def test_a_broker_that_does_not_answer_fails_after_the_retries(free_port: int) -> None:
    slept: list[float] = []
    with connect(f"http://127.0.0.1:{free_port}", slept=slept) as client:
        with pytest.raises(BrokerUnavailableError, match="no answer after 3 attempts") as err:
            client.queues("Orders")
        assert "Is spoolmq running" in str(err.value)
        with pytest.raises(OutcomeUnknownError, match="may or may not be stored"):
            client.send("Orders", {"messages": [{"body": "x"}]}, "k")
    assert len(slept) == 4


def test_the_next_endpoint_answers_when_the_first_does_not(
    live_server: LiveServer, topic: str, free_port: int
) -> None:
    live_server.client().put(f"/v1/topics/{topic}", json={})
    with connect(f"http://127.0.0.1:{free_port}", live_server.url) as client:
        assert len(client.queues(topic)) == 8


def test_an_unknown_outcome_is_retried_with_the_same_key_and_rows() -> None:
    with stub_server() as (url, state), connect(url) as client:
        state.fail_first, state.fail_status = 2, 504  # a proxy's OUTCOME_UNKNOWN, twice
        sent = client.send("T", {"messages": [{"body": "x"}]}, "spark:q:3:1:0")
    assert [r["msg_id"] for r in sent.receipts] == ["ID000000"]
    assert [key for key, _ in state.attempts] == ["spark:q:3:1:0"] * 3
    assert all(body == state.attempts[0][1] for _, body in state.attempts)
