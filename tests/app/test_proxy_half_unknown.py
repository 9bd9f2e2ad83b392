"""A half send that may have been written is answered 504 OUTCOME_UNKNOWN, not 503 with
Retry-After: the proxy does not send it again (a second half is a second transaction), and
neither should its client — if it was stored, the broker's check-back asks the producer group.

Real etcd, real brokers, the proxy on uvicorn; g2's master is a socket on 127.0.0.1 that reads
a request and hangs up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.proxy.support import BadBroker, Cluster, create_topic, g2_is, is_problem, two_groups


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


def test_a_half_send_that_may_have_been_written_is_an_unknown_outcome(cluster: Cluster) -> None:
    create_topic(cluster.http, "HalfUnsure", 4)  # queues 2, 3 on g2
    bad = BadBroker("hang_up")
    with g2_is(cluster, bad) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        answer = http.post(
            "/v1/topics/HalfUnsure/transactions",
            json={"producer_group": "pg", "message": {"body": "x", "queue_id": 3}},
        )
    is_problem(answer, 504, "OUTCOME_UNKNOWN")
    assert "retry-after" not in answer.headers
    assert len(bad.keys) == 1  # tried once
