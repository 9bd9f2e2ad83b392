"""The Spark jobs' one HTTP client against real servers: reads, keyed sends and their replays,
every refusal mapped to a clear error, and its retry rules -- which answers are retried, which
go to the next endpoint (a real slave's 421 among them), how long it waits (backoff,
``Retry-After``), and a send's key and body kept on every attempt."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from spark_jobs.errors import (
    AuthenticationError,
    BrokerRefusedError,
    BrokerUnavailableError,
    IdempotencyKeyReusedError,
    OutcomeUnknownError,
    PermissionDeniedError,
    UnknownTopicError,
)
from spark_jobs.http_client import (
    Connection,
    RetryPolicy,
    SpoolmqClient,
    retry_after_s,
)
from spark_jobs.streaming.discovery import discover
from spark_jobs.streaming.options import parse_source_options
from tests.app.auth_support import start_auth_server
from tests.conftest import LiveServer, start_server
from tests.spark_jobs.stub_server import StubState, stub_server
from tests.tls_support import make_certificates

FAST = RetryPolicy(retries=2, backoff_ms=1, max_backoff_ms=1, timeout_s=5)
ONE = {"messages": [{"body": "x"}]}


def connect(
    *urls: str,
    token: str | None = None,
    slept: list[float] | None = None,
    policy: RetryPolicy = FAST,
) -> SpoolmqClient:
    sleep = slept.append if slept is not None else (lambda _: None)
    return SpoolmqClient(Connection(tuple(urls), token, policy), sleep=sleep)


@pytest.fixture
def two_stubs() -> Iterator[tuple[tuple[str, StubState], tuple[str, StubState]]]:
    """Two stub servers, to see which endpoint each attempt went to."""
    with stub_server() as first, stub_server() as second:
        yield first, second


@pytest.fixture(scope="module")
def master_and_slave(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LiveServer, LiveServer]]:
    """A master and its slave, each a real server; the slave answers writes 421 NOT_MASTER."""
    master = start_server(
        tmp_path_factory.mktemp("master"), broker_name="master-r", ha_listen="127.0.0.1:0"
    )
    ha_address = master.broker.replica.ha_address
    assert ha_address is not None
    try:
        slave = start_server(
            tmp_path_factory.mktemp("slave"),
            broker_name="slave-r",
            role="slave",
            master_http=master.url,
            master_ha=ha_address,
            master_name="master-r",
        )
    except BaseException:
        master.stop()
        raise
    yield master, slave
    slave.stop()
    master.stop()


def test_a_pattern_subscription_never_takes_the_brokers_trace(tmp_path: Path) -> None:
    """Message trace records are the broker's, not messages: a topic listing (and so a
    ``subscribePattern`` of the streaming source) leaves the trace topic out."""
    live = start_server(tmp_path / "store", trace=True)
    try:
        http = live.client()
        assert http.post("/v1/topics/TracedOrders/messages", json={"body": "m"}).is_success
        options = {"spoolmq.endpoints": live.url, "subscribePattern": ".*"}
        subscription = parse_source_options(options, streaming=False).subscription
        with connect(live.url) as client:
            assert "RMQ_SYS_TRACE_TOPIC" not in client.topic_names()
            assert {topic for topic, _ in discover(client, subscription)} == {"TracedOrders"}
    finally:
        live.stop()


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
        ranged = client.records(topic, 1, 1, 4, max_bytes=1 << 20)
        assert (ranged.status, ranged.next_offset, ranged.count) == ("FOUND", 4, 3)
        assert (ranged.min_offset, ranged.max_offset) == (0, 5)
        assert client.records(topic, 1, 5, 6).status == "OFFSET_OVERFLOW_ONE"
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
        state.fail(504, times=2)  # a proxy's OUTCOME_UNKNOWN, twice
        sent = client.send("T", ONE, "spark:q:3:1:0")
        assert client.retried == 2
    assert [r["msg_id"] for r in sent.receipts] == ["ID000000"]
    assert [key for key, _ in state.attempts] == ["spark:q:3:1:0"] * 3
    assert all(body == state.attempts[0][1] for _, body in state.attempts)


# ------------------------------------------------------------------ the retry rules


def test_a_slaves_421_sends_the_write_to_the_master_which_stores_it_once(
    master_and_slave: tuple[LiveServer, LiveServer], topic: str
) -> None:
    master, slave = master_and_slave
    with connect(slave.url, master.url, policy=RetryPolicy(retries=1, timeout_s=10)) as client:
        first = client.send(topic, {"messages": [{"body": "a"}]}, "k-421-a")
        assert client.retried == 1  # the slave's 421, then the master
        second = client.send(topic, {"messages": [{"body": "b"}]}, "k-421-b")
        assert client.retried == 1  # it stays with the endpoint that answered
    assert (first.replayed, second.replayed) == (False, False)
    stored = [
        m["body"]
        for q in range(8)
        for m in master.client()
        .get(f"/v1/topics/{topic}/queues/{q}/messages", params={"offset": 0})
        .json()["messages"]
    ]
    assert sorted(stored) == ["a", "b"]
    assert slave.client().post(f"/v1/topics/{topic}/messages", json=ONE).status_code == 421


@pytest.mark.parametrize(
    ("status", "rotates"),
    [(408, False), (421, True), (425, False), (429, False), (500, False), (502, True),
     (503, True), (504, False)],
)  # fmt: skip
def test_a_retryable_answer_is_retried_and_some_go_to_the_next_endpoint(
    two_stubs: tuple[tuple[str, StubState], tuple[str, StubState]], status: int, rotates: bool
) -> None:
    (first_url, first), (second_url, second) = two_stubs
    first.fail(status)
    with connect(first_url, second_url) as client:
        sent = client.send("T", ONE, "k-1")
        assert client.retried == 1
    assert [r["msg_id"] for r in sent.receipts] == ["ID000000"]
    assert (len(first.attempts), len(second.attempts)) == ((1, 1) if rotates else (2, 0))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422, 501])
def test_an_answer_outside_the_retry_set_fails_at_once(status: int) -> None:
    slept: list[float] = []
    with stub_server() as (url, state), connect(url, slept=slept) as client:
        state.refuse_with = status
        with pytest.raises(BrokerRefusedError, match=f"{status} REFUSED: no thanks"):
            client.send("T", ONE, "k-2")
        assert client.retried == 0
    assert (len(state.attempts), slept) == (1, [])


def test_a_send_keeps_its_key_and_body_on_every_attempt_and_endpoint(
    two_stubs: tuple[tuple[str, StubState], tuple[str, StubState]],
) -> None:
    (first_url, first), (second_url, second) = two_stubs
    first.fail(421)  # a slave: on to the second endpoint
    second.fail(503)  # cannot serve now: back to the first
    batch = {"messages": [{"body": "x"}, {"body": "y", "tags": "T"}], "sharding_key": "s"}
    with connect(first_url, second_url) as client:
        sent = client.send("T", batch, "replay-run-7")
    assert len(sent.receipts) == 2
    attempts = first.attempts[:1] + second.attempts + first.attempts[1:]
    assert len(attempts) == 3
    assert {key for key, _ in attempts} == {"replay-run-7"}
    assert all(body == batch for _, body in attempts)
    assert first.messages == batch["messages"] and second.messages == []


def test_429_waits_as_long_as_retry_after_asks_on_the_same_endpoint(
    two_stubs: tuple[tuple[str, StubState], tuple[str, StubState]],
) -> None:
    (first_url, first), (second_url, second) = two_stubs
    first.fail(429, headers={"Retry-After": "7"})  # beyond the backoff's cap: still waited
    slept: list[float] = []
    with connect(first_url, second_url, slept=slept) as client:
        client.send("T", ONE, "k-3")
    assert slept == [7.0]
    assert (len(first.attempts), len(second.attempts)) == (2, 0)


def test_a_retry_after_date_is_waited_for_up_to_the_ceiling() -> None:
    policy = RetryPolicy(retries=3, backoff_ms=1, max_retry_after_s=30)
    tomorrow = format_datetime(datetime.now(UTC) + timedelta(days=1), usegmt=True)
    slept: list[float] = []
    with stub_server() as (url, state), connect(url, slept=slept, policy=policy) as client:
        state.fail(503, headers={"Retry-After": tomorrow})
        state.fail(503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
        state.fail(503, headers={"Retry-After": "soon"})
        client.send("T", ONE, "k-4")
    assert slept == [30.0, 0.0, 0.004]  # the ceiling; a date gone by; unreadable: the backoff


def test_the_waits_double_from_the_backoff_up_to_its_cap() -> None:
    policy = RetryPolicy(retries=4, backoff_ms=100, max_backoff_ms=350)
    slept: list[float] = []
    with stub_server() as (url, state), connect(url, slept=slept, policy=policy) as client:
        state.fail(500, times=4)
        client.send("T", ONE, "k-5")
    assert slept == [0.1, 0.2, 0.35, 0.35]


def test_retry_after_reads_seconds_and_http_dates() -> None:
    then = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert retry_after_s("120") == 120.0
    assert retry_after_s(" 3 ") == 3.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=lambda: then - 90) == 90.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=lambda: then + 5) == 0.0
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 -0000", now=lambda: then) == 0.0
    for unreadable in (None, "", "soon", "-5", "1.5"):
        assert retry_after_s(unreadable) is None
    policy = RetryPolicy(backoff_ms=200, max_backoff_ms=1000, max_retry_after_s=60)
    assert [policy.delay_s(n) for n in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.delay_s(4, "1") == 1.0
    assert policy.delay_s(0, "30") == 30.0  # what the server asked, beyond the backoff's cap
    assert policy.delay_s(0, "3600") == 60.0  # but never beyond max_retry_after_s


def test_without_a_2xx_a_send_is_of_unknown_outcome_and_a_commit_unavailable() -> None:
    with stub_server() as (url, state), connect(url) as client:
        state.refuse_with = 503
        with pytest.raises(OutcomeUnknownError, match=r"last: .* HTTP 503 REFUSED: no thanks"):
            client.send("T", ONE, "k-6")
        with pytest.raises(BrokerUnavailableError, match="no answer after 3 attempts") as err:
            client.commit_offsets("G", [("T", 0, 1)])
        assert not isinstance(err.value, OutcomeUnknownError)
        assert client.retried == 4
    assert len(state.attempts) == 6


def test_an_https_broker_is_checked_against_the_ca_given(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path / "pki")
    live = start_server(tmp_path / "store", **certificates.settings())
    try:
        trusting = Connection((live.url,), retry=FAST, ca_file=str(certificates.ca))
        with SpoolmqClient(trusting) as client:
            client.call("PUT", "/v1/topics/Tls", json={"write_queue_nums": 1}, what="creating")
            assert {q.topic for q in client.queues("Tls")} == {"Tls"}
        untrusting = SpoolmqClient(Connection((live.url,), retry=FAST))  # the system's CAs
        with untrusting, pytest.raises(BrokerUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
            untrusting.queues("Tls")
    finally:
        live.stop()
