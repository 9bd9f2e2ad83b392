"""A send the proxy keyed itself, once it may have been written, is never sent again without
its key: a broker that answers IDEMPOTENCY_UNAVAILABLE then (a new master without the message
index after a failover) cannot tell a repeat, so the outcome stays unknown (504).

Real etcd, real brokers, the proxy on uvicorn; g2's master is a socket on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.app.test_proxy import Cluster, create_topic, two_groups
from tests.app.test_proxy_send import BadBroker, g2_is, is_problem


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


class KeylessAfterHangUp(BadBroker):
    """Hangs up on the first request; answers every later keyed one 501
    IDEMPOTENCY_UNAVAILABLE; hangs up on an unkeyed one (noting it, as every request)."""

    def _read_request(self, connection: socket.socket) -> None:
        seen = len(self.keys)
        super()._read_request(connection)
        if len(self.keys) == seen or seen == 0 or not self.keys[-1]:
            return
        body = orjson.dumps(
            {"type": "about:blank", "status": 501, "code": "IDEMPOTENCY_UNAVAILABLE"}
        )
        connection.sendall(
            b"HTTP/1.1 501 Not Implemented\r\ncontent-type: application/problem+json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )


def test_a_send_that_may_have_been_written_is_never_sent_again_without_its_key(
    cluster: Cluster,
) -> None:
    create_topic(cluster.http, "Keyless", 4)  # queues 2, 3 on g2
    bad = KeylessAfterHangUp("hang_up")
    with g2_is(cluster, bad) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        unknown = http.post("/v1/topics/Keyless/messages", json={"body": "x", "queue_id": 3})
        is_problem(unknown, 504, "OUTCOME_UNKNOWN")
    assert len(bad.keys) >= 2 and bad.keys[0]
    assert "" not in bad.keys  # an unkeyed repeat could have been stored a second time
