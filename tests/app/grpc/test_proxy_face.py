"""The proxy's RocketMQ 5 gRPC face, driven by the official Python client given only the proxy's
gRPC address: two real broker groups behind it (a real etcd, real brokers), and a failover (a
master with a slave killed with SIGKILL under a producer)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from rocketmq import (  # type: ignore[import-untyped]
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2,
    service_pb2,
    service_pb2_grpc,
)

from app.grpc.server import GrpcServer
from tests.app.cluster_support import ClusterBroker
from tests.app.proxy.support import (
    CLUSTER,
    Cluster,
    ProxyServer,
    create_topic,
    local_queue_counts,
    start_proxy,
    two_groups,
)
from tests.conftest import wait_until
from tests.etcd_support import EtcdServer, start_etcd
from tests.net import free_ports

DEADLINE_S = 90.0
"""How long a test waits for what it expects (generous: the machine may be busy)."""


def grpc_address(proxy: ProxyServer) -> str:
    face: GrpcServer = proxy.app.state.grpc
    return f"127.0.0.1:{face.port}"


def config(address: str) -> ClientConfiguration:
    return ClientConfiguration(address, Credentials(), request_timeout=15)


def message(topic: str, body: str) -> Message:
    out = Message()
    out.topic = topic
    out.body = body.encode()
    out.tag = "paid"
    out.keys = body
    return out


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A real etcd, brokers as groups g1 and g2 and a proxy (:func:`two_groups`)."""
    yield from two_groups(tmp_path)


@pytest.fixture
def grpc_proxy(cluster: Cluster) -> Iterator[ProxyServer]:
    """A second proxy of the cluster, serving the gRPC face too."""
    proxy = start_proxy(cluster.etcd.url, grpc_listen="127.0.0.1:0")
    yield proxy
    proxy.stop()


def receive_and_ack(consumer: SimpleConsumer, count: int) -> list[str]:
    """Receive and ack until ``count`` messages came (or the deadline), and then until a
    receive comes back empty: what came more than once would be there twice."""
    bodies: list[str] = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        received = consumer.receive(16, 30)
        for one in received:
            consumer.ack(one)
            bodies.append(one.body.decode())
        if not received and len(bodies) >= count:
            break
    return bodies


def test_query_route_answers_the_proxys_address_for_every_queue_of_both_groups(
    cluster: Cluster, grpc_proxy: ProxyServer
) -> None:
    create_topic(cluster.http, "GrpcRouted", 8)
    address = grpc_address(grpc_proxy)
    port = int(address.rsplit(":", 1)[1])
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="GrpcRouted"))
        answer = wait_for_route(stub, request)
        assert answer.status.code == definition_pb2.Code.OK
        queues = answer.message_queues
        assert [q.id for q in queues] == list(range(8))
        assert {q.broker.name for q in queues} == {"g1", "g2"}
        assert {(a.host, a.port) for q in queues for a in q.broker.endpoints.addresses} == {
            ("127.0.0.1", port)
        }
        missing = stub.QueryRoute(
            service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="NoSuchTopic")),
            timeout=15,
        )
        assert missing.status.code == definition_pb2.Code.TOPIC_NOT_FOUND


def wait_for_route(stub: service_pb2_grpc.MessagingServiceStub, request: Any) -> Any:
    """The route, once the proxy's view has the topic (its etcd watch may lag a moment)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = stub.QueryRoute(request, timeout=15)
        if answer.status.code == definition_pb2.Code.OK or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def test_calls_the_proxy_does_not_serve_answer_unimplemented_with_a_message(
    cluster: Cluster, grpc_proxy: ProxyServer
) -> None:
    with grpc.insecure_channel(grpc_address(grpc_proxy)) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.EndTransaction(service_pb2.EndTransactionRequest(), timeout=15)
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "EndTransaction" in (refused.value.details() or "")


def test_spoolmq_proxy_grpc_listen_serves_the_face(cluster: Cluster, tmp_path: Path) -> None:
    """The command line: ``spoolmq proxy --grpc-listen`` (one process) answers QueryRoute."""
    create_topic(cluster.http, "GrpcCommand", 4)
    port, grpc_port = free_ports(2)
    command = [
        str(Path(sys.executable).parent / "spoolmq"),
        "proxy",
        "--cluster",
        CLUSTER,
        "--etcd",
        cluster.etcd.url,
        "--port",
        str(port),
        "--grpc-listen",
        f"127.0.0.1:{grpc_port}",
        "--log-level",
        "warning",
    ]
    with (tmp_path / "proxy.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=DEADLINE_S)
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            request = service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name="GrpcCommand")
            )
            answer = wait_for_route(stub, request)
        assert answer.status.code == definition_pb2.Code.OK
        assert [q.id for q in answer.message_queues] == [0, 1, 2, 3]
        assert {a.port for q in answer.message_queues for a in q.broker.endpoints.addresses} == {
            grpc_port
        }
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_producer_and_a_simple_consumer_given_only_the_proxy_work_across_both_groups(
    cluster: Cluster, grpc_proxy: ProxyServer
) -> None:
    topic = "GrpcAcross"
    create_topic(cluster.http, topic, 8)  # queues 0-3 on g1, 4-7 on g2
    address = grpc_address(grpc_proxy)
    wait_until(lambda: grpc_proxy.parts.registry.view.topics.get(topic) is not None)
    producer = Producer(config(address), (topic,))
    producer.startup()
    try:
        sent = {f"m-{i}": producer.send(message(topic, f"m-{i}")).message_id for i in range(24)}
    finally:
        producer.shutdown()
    assert sum(local_queue_counts(cluster.a, topic).values()) > 0  # both groups stored some
    assert sum(local_queue_counts(cluster.b, topic).values()) > 0
    assert sum(local_queue_counts(cluster.a, topic).values()) + sum(
        local_queue_counts(cluster.b, topic).values()
    ) == len(sent)

    consumer = SimpleConsumer(
        config(address), "GrpcAcrossWorkers", {topic: FilterExpression("paid")}, await_duration=2
    )
    consumer.startup()
    try:
        received = receive_and_ack(consumer, len(sent))
        assert sorted(received) == sorted(sent)  # each once: acked, none came back
        clients = grpc_proxy.app.state.grpc.face.clients.clients()
        assert any(c.group == "GrpcAcrossWorkers" and c.language for c in clients)
    finally:
        consumer.shutdown()


# ================================================================ across a failover


@dataclass
class Deployment:
    etcd: EtcdServer
    g1_a: ClusterBroker
    g1_b: ClusterBroker
    g2_a: ClusterBroker
    proxy: ProxyServer
    http: httpx.Client


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    """g1: g1-a (master) and g1-b (its slave, sync); g2: g2-a; a proxy with the gRPC face."""
    etcd = start_etcd(tmp_path)
    brokers = [
        ClusterBroker("g1-a", tmp_path / "g1a", etcd.url, group="g1"),
        ClusterBroker("g1-b", tmp_path / "g1b", etcd.url, group="g1"),
        ClusterBroker("g2-a", tmp_path / "g2a", etcd.url, group="g2", replication="async"),
    ]
    proxy: ProxyServer | None = None
    try:
        for broker in brokers:
            broker.start()
        proxy = start_proxy(etcd.url, cluster="test", grpc_listen="127.0.0.1:0")
        with httpx.Client(base_url=proxy.url, timeout=40) as http:
            yield Deployment(etcd, brokers[0], brokers[1], brokers[2], proxy, http)
    finally:
        if proxy is not None:
            proxy.stop()
        for broker in reversed(brokers):
            broker.stop()
        etcd.stop()


def masters(http: httpx.Client) -> dict[str, str]:
    return dict(http.get("/healthz").json()["masters"])


def test_sends_keep_succeeding_after_a_masters_kill_and_nothing_acknowledged_is_lost(
    deployment: Deployment,
) -> None:
    http = deployment.http
    topic = "GrpcFailover"
    wait_until(lambda: masters(http) == {"g1": "g1-a", "g2": "g2-a"}, timeout=60)
    created = http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 4, "read_queue_nums": 4})
    assert created.status_code == 201, created.text

    def g1_in_sync() -> bool:
        answer = httpx.get(f"{deployment.g1_a.url}/v1/topics/{topic}/route", timeout=10)
        groups = {g["group"]: g for g in answer.json()["groups"]} if answer.is_success else {}
        return "g1-b" in groups.get("g1", {}).get("in_sync", ())

    wait_until(g1_in_sync, timeout=60)
    wait_until(lambda: deployment.proxy.parts.registry.view.topics.get(topic) is not None)
    address = grpc_address(deployment.proxy)
    acknowledged: set[str] = set()
    producer = Producer(config(address), (topic,))
    producer.startup()
    try:
        for i in range(20):
            producer.send(message(topic, f"before-{i}"))
            acknowledged.add(f"before-{i}")
        deployment.g1_a.kill()  # kill -9: g1's lease has to lapse before g1-b is elected
        failed = sends_until_elected(producer, http, topic, acknowledged)
        assert masters(http)["g1"] == "g1-b"
        for i in range(20):  # after the election, every send succeeds
            producer.send(message(topic, f"after-{i}"))
            acknowledged.add(f"after-{i}")
    finally:
        producer.shutdown()

    consumer = SimpleConsumer(
        config(address), "GrpcFailoverWorkers", {topic: FilterExpression("*")}, await_duration=2
    )
    consumer.startup()
    try:
        received = receive_and_ack(consumer, len(acknowledged))
    finally:
        consumer.shutdown()
    assert acknowledged <= set(received), sorted(acknowledged - set(received))
    # a send the producer saw fail may still have been stored; nothing else came
    assert set(received) <= acknowledged | failed


def sends_until_elected(
    producer: Producer, http: httpx.Client, topic: str, acknowledged: set[str]
) -> set[str]:
    """Send during the failover until g1 has its new master: what the producer was answered
    goes into ``acknowledged``; the bodies of the sends that failed are answered."""
    failed: set[str] = set()
    stop = threading.Event()
    deadline = time.monotonic() + DEADLINE_S
    n = 0
    while not stop.is_set() and time.monotonic() < deadline:
        body = f"during-{n}"
        n += 1
        try:
            producer.send(message(topic, body))
            acknowledged.add(body)
        except Exception:  # the client's own exceptions: the send may not have been stored
            failed.add(body)
            time.sleep(0.2)
        if masters(http).get("g1") == "g1-b":
            stop.set()
    assert stop.is_set(), "g1 had no new master in time"
    return failed
