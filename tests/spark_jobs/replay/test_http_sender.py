"""Re-sending over HTTP without Spark: payloads, batches, rate limit, retries through the
Spark jobs' HTTP client (a slave's 421 too), progress."""

from __future__ import annotations

import base64
import dataclasses
import io
import secrets
from collections.abc import Callable

import httpx
import pytest

from spark_jobs.errors import BrokerRefusedError, OutcomeUnknownError
from spark_jobs.http_client import Connection, RetryPolicy, SpoolmqClient
from spark_jobs.replay.http_sender import (
    HttpReplaySender,
    Progress,
    ReplayMessage,
    TokenBucket,
    message_payload,
    replayable_properties,
)
from tests.conftest import LiveServer
from tests.spark_jobs.stub_server import stub_server


class FakeTime:
    """A clock that only moves when something sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def client(
    *urls: str,
    retries: int = 5,
    sleep: Callable[[float], None] = lambda _: None,
    transport: httpx.BaseTransport | None = None,
) -> SpoolmqClient:
    """The client a replay sends through, to ``urls`` in turn."""
    connection = Connection(urls, None, RetryPolicy(retries=retries, timeout_s=10))
    return SpoolmqClient(connection, sleep=sleep, transport=transport)


def messages(count: int, size: int = 10) -> list[ReplayMessage]:
    return [
        ReplayMessage(
            msg_id=f"ORIG{i:04d}",
            body=bytes([i % 256]) * size,
            tags="T" if i % 2 else None,
            keys=(f"k{i}",) if i % 3 == 0 else (),
            properties={"trace": f"t{i}", "UNIQ_KEY": "dropped", "TAGS": "dropped"},
        )
        for i in range(count)
    ]


def test_payload_carries_replay_of_and_no_system_properties() -> None:
    payload = message_payload(messages(4)[3])
    assert payload == {
        "body": base64.b64encode(bytes([3]) * 10).decode(),
        "body_encoding": "base64",
        "properties": {"trace": "t3", "REPLAY_OF": "ORIG0003"},
        "tags": "T",
        "keys": ["k3"],
    }
    odd = ReplayMessage("ID", b"", properties={"ok": "1", "bad": "a\x01b", "x\x02": "v"})
    assert message_payload(odd)["properties"] == {"ok": "1", "REPLAY_OF": "ID"}
    assert replayable_properties(odd.properties) == ({"ok": "1"}, 2)
    bare = message_payload(messages(1)[0], copy_properties=False)
    assert bare["properties"] == {"REPLAY_OF": "ORIG0000"}
    assert "tags" not in bare


def test_token_bucket_limits_the_rate() -> None:
    time = FakeTime()
    bucket = TokenBucket(rate=100, capacity=10, clock=time.clock, sleep=time.sleep)
    for _ in range(10):
        bucket.acquire(10)
    # 100 tokens at 100/s with a burst of 10: 0.9 s of waiting in total.
    assert sum(time.slept) == pytest.approx(0.9)
    with pytest.raises(ValueError):
        TokenBucket(rate=0, capacity=1)


def test_batches_by_count_and_bytes_in_order() -> None:
    with stub_server() as (url, state), client(url) as http:
        sender = HttpReplaySender(http, "Target", batch_size=4, max_batch_bytes=10_000, rate=None)
        for message in messages(10):
            sender.add(message)
        summary = sender.close()
        assert [len(body["messages"]) for _, body in state.requests] == [4, 4, 2]
        assert {path for path, _ in state.requests} == {"/v1/topics/Target/messages"}
        assert [m["properties"]["REPLAY_OF"] for m in state.messages] == [
            f"ORIG{i:04d}" for i in range(10)
        ]
        assert (summary.sent, summary.batches, summary.body_bytes) == (10, 3, 100)
        assert (summary.first_msg_id, summary.last_msg_id) == ("ID000000", "ID000009")

        big = HttpReplaySender(http, "Target", batch_size=100, max_batch_bytes=3_500, rate=None)
        for message in messages(6, size=1_000):
            big.add(message)
        big.close()
        assert [len(body["messages"]) for _, body in state.requests[3:]] == [2, 2, 2]


def test_rate_limit_applies_to_requests() -> None:
    time = FakeTime()
    with stub_server() as (url, _state), client(url) as http:
        sender = HttpReplaySender(
            http, "T", batch_size=5, rate=50, sleep=time.sleep, clock=time.clock
        )
        for message in messages(25):
            sender.add(message)
        sender.close()
    assert sum(time.slept) == pytest.approx(0.4)


def test_retries_busy_answers_then_succeeds() -> None:
    time = FakeTime()
    with stub_server() as (url, state), client(url, retries=3, sleep=time.sleep) as http:
        state.fail(503, times=2)
        sender = HttpReplaySender(http, "T", batch_size=3, rate=None)
        for message in messages(3):
            sender.add(message)
        summary = sender.close()
    assert summary.sent == 3 and summary.retries == 2
    assert len(state.requests) == 1
    assert time.slept == [0.2, 0.4]  # the client's backoff (RetryPolicy)


def test_a_slaves_421_is_retried_on_the_next_endpoint_under_the_same_key() -> None:
    with (
        stub_server() as (slave_url, slave),
        stub_server() as (master_url, master),
        client(slave_url, master_url) as http,
    ):
        slave.refuse_with = 421  # a slave never takes a write
        sender = HttpReplaySender(http, "T", batch_size=2, rate=None)
        for message in messages(4):
            sender.add(message)
        summary = sender.close()
    assert summary.sent == 4 and summary.retries == 1
    assert len(slave.attempts) == 1 and len(master.requests) == 2
    assert slave.attempts[0] == master.attempts[0]  # the same key and batch


def test_a_refused_batch_stops_the_replay_with_the_reason() -> None:
    with stub_server() as (url, state), client(url) as http:
        state.refuse_with = 422
        sender = HttpReplaySender(http, "T", batch_size=2, rate=None)
        with pytest.raises(BrokerRefusedError, match="HTTP 422 REFUSED: no thanks"):
            for message in messages(2):
                sender.add(message)
    assert len(state.attempts) == 1  # a 4xx is not retried


def test_an_unreachable_server_fails_after_the_retries(free_port: int) -> None:
    time = FakeTime()
    with client(f"http://127.0.0.1:{free_port}", retries=2, sleep=time.sleep) as http:
        sender = HttpReplaySender(http, "T", batch_size=1, rate=None)
        with pytest.raises(OutcomeUnknownError, match="no answer after 3 attempts"):
            sender.add(messages(1)[0])
    assert len(time.slept) == 2


def test_progress_lines() -> None:
    time = FakeTime()
    stream = io.StringIO()
    progress = Progress(1_000, stream=stream, interval=5, clock=time.clock)
    time.now += 2
    progress.update(100)
    time.now += 2
    progress.update(200)  # inside the interval: not printed
    time.now += 4
    progress.finish(400)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "replay: 100/1,000 messages (10.0%) · 50 msg/s · elapsed 2 s · eta 18 s",
        "replay: 400/1,000 messages (40.0%) · 50 msg/s · elapsed 8 s · eta 12 s",
    ]


class _AnswerLostOnce(httpx.BaseTransport):
    """Delivers every request, but drops the answer of the first one: a lost response."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers.get("idempotency-key"))
        response = self.inner.handle_request(request)
        if len(self.keys) == 1:
            response.read()
            response.close()
            raise httpx.ReadError("the connection dropped before the answer", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def test_a_batch_whose_answer_was_lost_is_stored_once(live_server: LiveServer) -> None:
    topic = f"Replay{secrets.token_hex(4)}"
    transport = _AnswerLostOnce()
    time = FakeTime()
    with client(live_server.url, sleep=time.sleep, transport=transport) as http:
        sender = HttpReplaySender(http, topic, batch_size=3, rate=None)
        sent = messages(3)
        sent[0] = dataclasses.replace(
            sent[0], properties={"IDEMPOTENCY_KEY": "from-the-source", "IDEMPOTENCY_FP": "f"}
        )
        for message in sent:
            sender.add(message)
        summary = sender.close()

    assert summary.sent == 3 and summary.retries == 1
    assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1] is not None
    with httpx.Client(base_url=live_server.url) as reader:
        stored = [
            m
            for q in range(8)
            for m in reader.get(f"/v1/topics/{topic}/queues/{q}/messages").json()["messages"]
        ]
    assert sorted(m["properties"]["REPLAY_OF"] for m in stored) == [
        "ORIG0000",
        "ORIG0001",
        "ORIG0002",
    ]
    first = next(m for m in stored if m["properties"]["REPLAY_OF"] == "ORIG0000")
    assert first["properties"].get("IDEMPOTENCY_KEY") != "from-the-source"
