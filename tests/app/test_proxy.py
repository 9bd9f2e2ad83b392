"""The proxy against a real etcd and two real brokers as two broker groups, the proxy itself a
real server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest

from app.proxy.context import ProxyLimits
from app.proxy.main import create_proxy_app
from app.proxy.messages import may_name
from app.server import Server, ServerLimits
from services.cluster import BrokerMember, ClusterKeys, EtcdClient
from tests.conftest import LiveServer, start_server, wait_until
from tests.etcd_support import EtcdServer, start_etcd

CLUSTER = "c1"
KEYS = ClusterKeys(CLUSTER)


@dataclass
class ProxyServer:
    url: str
    server: Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the proxy did not stop"


def start_proxy(
    etcd_url: str,
    cluster: str = CLUSTER,
    limits: ProxyLimits | None = None,
    server_limits: ServerLimits | None = None,
) -> ProxyServer:
    """A proxy served as ``spoolmq proxy`` serves it."""
    app = create_proxy_app(cluster, [etcd_url], limits)
    server = Server(app, server_limits)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    proxy = ProxyServer(url, server, thread)
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=5).status_code == 200:
                return proxy
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            proxy.stop()
            raise RuntimeError("the proxy did not start")
        time.sleep(0.02)


def member(name: str, group: str, live: LiveServer, role: str = "master") -> BrokerMember:
    ha = live.broker.replica.ha_address or "127.0.0.1:1"
    return BrokerMember(name, group, live.url, ha, role)


def put_members(etcd_url: str, masters: dict[str, BrokerMember], *others: BrokerMember) -> None:
    """Write what the election would: each group's master key and its broker keys."""

    async def run() -> None:
        client = EtcdClient([etcd_url])
        try:
            for group, master in masters.items():
                await client.put(KEYS.master(group), master.to_json())
                await client.put(KEYS.broker(group, master.name), master.to_json())
            for other in others:
                await client.put(KEYS.broker(other.group, other.name), other.to_json())
        finally:
            await client.aclose()

    asyncio.run(run())


@dataclass
class Cluster:
    etcd: EtcdServer
    a: LiveServer  # group g1
    b: LiveServer  # group g2
    proxy: ProxyServer
    http: httpx.Client


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


def two_groups(tmp_path: Path, **overrides: Any) -> Iterator[Cluster]:
    """etcd, brokers a (group g1) and b (group g2), and a proxy; all stopped afterwards.
    ``overrides``: settings of both brokers."""
    etcd = start_etcd(tmp_path)
    started: list[LiveServer] = []
    try:
        a = start_server(tmp_path / "a", broker_name="a", **overrides)
        started.append(a)
        b = start_server(tmp_path / "b", broker_name="b", ha_listen="127.0.0.1:0", **overrides)
        started.append(b)
        put_members(etcd.url, {"g1": member("a", "g1", a), "g2": member("b", "g2", b)})
        proxy = start_proxy(etcd.url)
    except BaseException:
        for live in started:
            live.stop()
        etcd.stop()
        raise
    with httpx.Client(base_url=proxy.url, timeout=40) as http:
        yield Cluster(etcd, a, b, proxy, http)
    proxy.stop()
    for live in started:
        if live.thread.is_alive():
            live.stop()
    etcd.stop()


def create_topic(http: httpx.Client, topic: str, queues: int = 8) -> dict[str, Any]:
    answer = http.put(f"/v1/topics/{topic}", json={"write_queue_nums": queues})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def send(http: httpx.Client, topic: str, body: str, **fields: Any) -> dict[str, Any]:
    answer = http.post(f"/v1/topics/{topic}/messages", json={"body": body, **fields})
    assert answer.status_code == 201, answer.text
    return dict(answer.json()["messages"][0])


def local_queue_counts(live: LiveServer, topic: str) -> dict[int, int]:
    answer = httpx.get(f"{live.url}/v1/topics/{topic}", timeout=10)
    if answer.status_code == 404:  # not (yet) on this broker
        return {}
    detail = answer.json()
    return {q["queue_id"]: q["max_offset"] for q in detail["queues"]}


def test_topic_is_spread_and_sends_reach_every_queue_of_both_groups(cluster: Cluster) -> None:
    http = cluster.http
    route = create_topic(http, "Orders")
    assert [(q["queue_id"], q["group"], q["local_queue_id"]) for q in route["queues"]] == [
        (0, "g1", 0), (1, "g1", 1), (2, "g1", 2), (3, "g1", 3),
        (4, "g2", 0), (5, "g2", 1), (6, "g2", 2), (7, "g2", 3),
    ]  # fmt: skip
    assert http.get("/v1/topics/Orders/route").json() == route
    receipts = [send(http, "Orders", f"m{i}") for i in range(16)]
    assert sorted(r["queue_id"] for r in receipts) == sorted(list(range(8)) * 2)
    assert local_queue_counts(cluster.a, "Orders") == {0: 2, 1: 2, 2: 2, 3: 2}
    assert local_queue_counts(cluster.b, "Orders") == {0: 2, 1: 2, 2: 2, 3: 2}

    explicit = send(http, "Orders", "to-six", queue_id=6)
    assert explicit["queue_id"] == 6
    assert local_queue_counts(cluster.b, "Orders")[2] == 3
    pulled = http.get("/v1/topics/Orders/queues/6/messages").json()
    assert pulled["queue_id"] == 6
    assert {m["queue_id"] for m in pulled["messages"]} == {6}
    bodies = [m["body"] for m in pulled["messages"]]
    sent_to_six = [f"m{i}" for i, r in enumerate(receipts) if r["queue_id"] == 6]
    assert bodies == [*sent_to_six, "to-six"]

    found = http.get(f"/v1/messages/{explicit['msg_id']}").json()
    assert (found["body"], found["queue_id"]) == ("to-six", 6)
    keyed = send(http, "Orders", "keyed", keys=["order-42"], sharding_key="cust-1")
    by_key = http.get("/v1/topics/Orders/messages", params={"key": "order-42"}).json()
    assert [(m["body"], m["queue_id"]) for m in by_key["messages"]] == [
        ("keyed", keyed["queue_id"])
    ]
    again = send(http, "Orders", "keyed-again", sharding_key="cust-1")
    assert again["queue_id"] == keyed["queue_id"]

    raw = http.post(
        "/v1/topics/Orders/messages",
        params={"queue_id": 5},
        content=b"\x00raw",
        headers={"content-type": "application/octet-stream"},
    )
    assert raw.status_code == 201 and raw.json()["messages"][0]["queue_id"] == 5


def test_a_topic_keeps_its_route_once_created(cluster: Cluster) -> None:
    http = cluster.http
    first = create_topic(http, "Kept", 4)
    again = http.put("/v1/topics/Kept", json={"write_queue_nums": 4})
    assert again.status_code == 200, again.text
    assert again.json()["queues"] == first["queues"]
    for changed in ({"write_queue_nums": 6}, {"write_queue_nums": 4, "groups": ["g1"]}):
        refused = http.put("/v1/topics/Kept", json=changed)
        assert refused.status_code == 409, refused.text
        assert refused.json()["code"] == "ROUTE_CONFLICT"
    assert http.get("/v1/topics/Kept/route").json()["queues"] == first["queues"]


def test_errors_are_problems_and_broker_4xx_passes_through(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Errs", 4)
    invalid: list[dict[str, Any]] = [
        {"groups": ["g1", "nope"]},
        {"groups": []},
        {"write_queue_nums": 10**9},
    ]
    for bad in invalid:
        refused = http.put("/v1/topics/Bad", json=bad)
        assert (refused.status_code, refused.json()["code"]) == (422, "VALIDATION_FAILED")
    unknown = http.put("/v1/topics/Bad", json={"groups": ["g1", "nope"]}).json()["detail"]
    assert "nope in cluster 'c1' (its groups: g1, g2)" in unknown
    bad_name = http.put("/v1/topics/bad%20name", json={})
    assert (bad_name.status_code, bad_name.json()["code"]) == (400, "INVALID_TOPIC_NAME")
    for name in ("Bad", "bad%20name"):
        assert http.get(f"/v1/topics/{name}/route").status_code == 404
    # A name the broker accepts reaches it as it was sent: "%" is one of its characters.
    percent = http.put("/v1/topics/50%25off", json={"write_queue_nums": 2})
    assert percent.status_code == 201, percent.text
    assert httpx.get(f"{cluster.a.url}/v1/topics/50%25off", timeout=10).json()["topic"] == "50%off"
    missing = http.post("/v1/topics/Nope/messages", json={"body": "x"})
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    assert missing.json()["code"] == "TOPIC_NOT_FOUND"
    no_queue = http.get("/v1/topics/Errs/queues/9/messages")
    assert (no_queue.status_code, no_queue.json()["code"]) == (404, "QUEUE_NOT_FOUND")
    bad_json = http.post(
        "/v1/topics/Errs/messages", content=b"{", headers={"content-type": "application/json"}
    )
    assert (bad_json.status_code, bad_json.json()["code"]) == (400, "MALFORMED_JSON")
    for bad_queue in ("2", -1):
        wrong = http.post("/v1/topics/Errs/messages", json={"body": "x", "queue_id": bad_queue})
        assert (wrong.status_code, wrong.json()["code"]) == (422, "VALIDATION_FAILED")
    raw_wrong = http.post("/v1/topics/Errs/messages", params={"queue_id": "-3"}, content=b"x")
    assert raw_wrong.status_code == 422
    split = http.post(
        "/v1/topics/Errs/messages",
        json={"messages": [{"body": "a", "queue_id": 0}, {"body": "b", "queue_id": 3}]},
    )
    assert (split.status_code, split.json()["code"]) == (422, "BATCH_REJECTED")
    from_broker = http.get("/v1/topics/Errs/queues/3/messages", params={"max_messages": 0})
    assert from_broker.status_code == 422
    assert from_broker.json()["code"] == "VALIDATION_FAILED"
    assert all(
        max(local_queue_counts(live, "Errs").values()) == 0 for live in (cluster.a, cluster.b)
    )


def test_a_proxy_of_a_cluster_nobody_joined_says_to_check_its_name(cluster: Cluster) -> None:
    proxy = start_proxy(cluster.etcd.url, cluster="demo")  # the brokers joined "c1"
    try:
        answer = httpx.put(f"{proxy.url}/v1/topics/T", json={"groups": ["g1"]}, timeout=10)
        assert answer.status_code == 422
        assert "cluster 'demo' (no broker has joined it" in answer.json()["detail"]
        assert "--cluster" in answer.json()["detail"]
    finally:
        proxy.stop()


def test_group_pull_through_the_proxy_drains_everything_exactly_once(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Drain")
    assert http.put("/v1/groups/Workers", json={}).status_code in (200, 201)
    sent = {f"d{i}" for i in range(30)}
    batch = http.post(
        "/v1/topics/Drain/messages", json={"messages": [{"body": b} for b in sorted(sent)][:10]}
    )
    assert batch.status_code == 201
    assert len({m["queue_id"] for m in batch.json()["messages"]}) == 1
    for body in sorted(sent)[10:]:
        send(http, "Drain", body)

    seen: list[str] = []
    for _ in range(40):
        pulled = http.get("/v1/groups/Workers/topics/Drain/messages", params={"max_messages": 7})
        assert pulled.status_code == 200, pulled.text
        answer = pulled.json()
        assert len(answer["messages"]) <= 7
        if not answer["messages"]:
            break
        seen.extend(m["body"] for m in answer["messages"])
        commits = [
            {
                "topic": q["topic"],
                "queue_id": q["queue_id"],
                "offset": q["next_offset"],
                "broker_group": q["broker_group"],
            }
            for q in answer["queues"]
        ]
        committed = http.post("/v1/groups/Workers/offsets", json={"offsets": commits})
        assert committed.status_code == 200, committed.text
    assert sorted(seen) == sorted(sent)

    late = threading.Timer(0.3, lambda: send(http_other, "Drain", "late"))
    with httpx.Client(base_url=cluster.proxy.url, timeout=40) as http_other:
        late.start()
        parked = http.get(
            "/v1/groups/Workers/topics/Drain/messages", params={"wait_ms": 20000}
        ).json()
        late.join()
    assert [m["body"] for m in parked["messages"]] == ["late"]
    assert set(range(8)) == {
        q["queue_id"]
        for q in http.get("/v1/groups/Workers/topics/Drain/messages").json()["queues"]
        if q["topic"] == "Drain"
    }


def test_an_auto_commit_long_poll_commits_only_what_it_delivered(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Parked")
    assert http.put("/v1/groups/Sleepers", json={}).status_code in (200, 201)
    params: dict[str, str | int] = {"wait_ms": 20000, "auto_commit": "true"}
    late = threading.Timer(0.3, lambda: send(http_other, "Parked", "wake"))
    with httpx.Client(base_url=cluster.proxy.url, timeout=40) as http_other:
        late.start()
        parked = http.get("/v1/groups/Sleepers/topics/Parked/messages", params=params).json()
        late.join()
    assert [m["body"] for m in parked["messages"]] == ["wake"]
    # committed by the proxy once the race was decided: not delivered again
    again = http.get("/v1/groups/Sleepers/topics/Parked/messages", params={"auto_commit": "true"})
    assert again.status_code == 200
    assert again.json()["messages"] == []
    send(http, "Parked", "next")
    after = http.get("/v1/groups/Sleepers/topics/Parked/messages", params={"auto_commit": "true"})
    assert [m["body"] for m in after.json()["messages"]] == ["next"]


def test_pop_receive_and_ack_through_the_proxy(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Jobs", 4)
    for i in range(6):
        send(http, "Jobs", f"j{i}")
    received: list[dict[str, Any]] = []
    for _ in range(20):
        answer = http.post(
            "/v1/groups/Poppers/topics/Jobs/receive", json={"max_messages": 4, "wait_ms": 0}
        )
        assert answer.status_code == 200, answer.text
        received.extend(answer.json()["messages"])
        if len(received) >= 6:
            break
    assert sorted(m["body"] for m in received) == [f"j{i}" for i in range(6)]
    assert {m["receipt_handle"].split("~")[0] for m in received} == {"g1", "g2"}
    handles = [m["receipt_handle"] for m in received]
    acked = http.post("/v1/groups/Poppers/acks", json={"receipt_handles": [*handles, "junk"]})
    assert acked.status_code == 200, acked.text
    outcomes = [r["outcome"] for r in acked.json()["results"]]
    assert outcomes == ["acked"] * 6 + ["invalid"]
    assert [r["receipt_handle"] for r in acked.json()["results"]] == [*handles, "junk"]
    empty = http.post("/v1/groups/Poppers/topics/Jobs/receive", json={"wait_ms": 0})
    assert empty.json()["messages"] == []

    send(http, "Jobs", "later")
    waited = http.post("/v1/groups/Poppers/topics/Jobs/receive", json={"wait_ms": 5000})
    [late] = waited.json()["messages"]
    changed = http.post(
        "/v1/groups/Poppers/invisibility",
        json={"receipt_handle": late["receipt_handle"], "invisible_ms": 60000},
    )
    assert changed.status_code == 200, changed.text
    new_handle = changed.json()["receipt_handle"]
    assert new_handle.startswith(late["receipt_handle"].split("~")[0] + "~")
    final = http.post("/v1/groups/Poppers/acks", json={"receipt_handles": [new_handle]})
    assert final.json()["results"][0]["outcome"] == "acked"


def test_a_new_master_in_etcd_is_followed(cluster: Cluster, tmp_path: Path) -> None:
    http = cluster.http
    create_topic(http, "Fail", 4)  # queues 2, 3 are g2's (broker b)
    before = send(http, "Fail", "before", queue_id=3)
    b = cluster.b
    slave = start_server(
        tmp_path / "b2",
        broker_name="b2",
        role="slave",
        master_http=b.url,
        master_ha=b.broker.replica.ha_address,
        master_name="b",
        config_sync_interval_s=0.2,
    )
    try:
        put_members(cluster.etcd.url, {}, member("b2", "g2", slave, "slave"))
        wait_until(lambda: http.get("/healthz").json()["slaves"].get("g2") == ["b2"])
        wait_until(lambda: local_queue_counts(slave, "Fail").get(1) == 1, timeout=60)
        b.stop()
        # The master is gone and etcd still names it: reads fall back to the slave ...
        from_slave = http.get("/v1/topics/Fail/queues/3/messages").json()
        assert [(m["body"], m["queue_id"]) for m in from_slave["messages"]] == [("before", 3)]
        # ... while writes there wait for a new master.
        refused = http.post("/v1/topics/Fail/messages", json={"body": "x", "queue_id": 3})
        assert refused.status_code == 503 and "retry-after" in refused.headers
        put_members(cluster.etcd.url, {"g2": member("b2", "g2", slave)})
        wait_until(lambda: http.get("/healthz").json()["masters"].get("g2") == "b2", timeout=30)
        # Named master before it is promoted: its 421 passes through as the broker gave it.
        early = http.post("/v1/topics/Fail/messages", json={"body": "x", "queue_id": 3})
        assert (early.status_code, early.json()["code"]) == (421, "NOT_MASTER")
        asyncio.run_coroutine_threadsafe(slave.broker.replica.promote(2), slave.broker.loop).result(
            60
        )
        pulled = http.get("/v1/topics/Fail/queues/3/messages").json()
        assert [(m["body"], m["queue_id"]) for m in pulled["messages"]] == [("before", 3)]
        found = http.get(f"/v1/messages/{before['msg_id']}")
        assert (found.status_code, found.json()["queue_id"]) == (200, 3)
        after = send(http, "Fail", "after", queue_id=3)
        assert after["queue_id"] == 3
        assert local_queue_counts(slave, "Fail")[1] == 2
        assert send(http, "Fail", "g1 still", queue_id=0)["queue_id"] == 0
    finally:
        slave.stop()


def test_a_broker_down_is_503_for_its_queues_while_the_other_group_serves(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Half", 4)  # g1 hosts 0, 1; g2 hosts 2, 3
    for i in range(4):
        send(http, "Half", f"h{i}", queue_id=i)
    cluster.a.stop()

    down = http.post("/v1/topics/Half/messages", json={"body": "x", "queue_id": 0})
    assert down.status_code == 503
    assert down.headers["retry-after"] == "1"
    assert down.json()["code"] == "BROKER_UNAVAILABLE"
    pull_down = http.get("/v1/topics/Half/queues/1/messages")
    assert pull_down.status_code == 503 and "retry-after" in pull_down.headers

    assert send(http, "Half", "still", queue_id=2)["queue_id"] == 2
    for _ in range(4):  # round robin skips the group that does not answer
        assert send(http, "Half", "rr")["queue_id"] in (2, 3)
    pulled = http.get("/v1/topics/Half/queues/3/messages").json()
    assert pulled["messages"][0]["body"] == "h3"
    assert {m["queue_id"] for m in pulled["messages"]} == {3}
    group_pull = http.get("/v1/groups/Any/topics/Half/messages", params={"max_messages": 32})
    assert group_pull.status_code == 200
    assert {m["queue_id"] for m in group_pull.json()["messages"]} == {2, 3}


def test_with_etcd_down_the_proxy_keeps_routing_on_its_last_view(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Kept", 4)
    cluster.etcd.stop()
    assert send(http, "Kept", "still routed", queue_id=3)["queue_id"] == 3
    assert http.get("/v1/topics/Kept/queues/3/messages").json()["messages"][0]["body"] == (
        "still routed"
    )
    refused = http.put("/v1/topics/New", json={"write_queue_nums": 2})
    assert refused.status_code == 503
    assert refused.json()["code"] == "ETCD_UNAVAILABLE"
    assert refused.headers["retry-after"] == "1"


def test_a_topic_answers_every_queue_with_cluster_wide_ids_and_its_group(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Stats", 4)  # g1 hosts 0, 1; g2 hosts 2, 3
    for queue_id, count in ((0, 2), (2, 1), (3, 3)):
        for i in range(count):
            send(http, "Stats", f"s{queue_id}-{i}", queue_id=queue_id)

    detail = http.get("/v1/topics/Stats")
    assert detail.status_code == 200, detail.text
    body = detail.json()
    assert (body["topic"], body["read_queue_nums"], body["write_queue_nums"]) == ("Stats", 4, 4)
    queues = [
        (q["queue_id"], q["broker_group"], q["min_offset"], q["max_offset"]) for q in body["queues"]
    ]
    assert queues == [(0, "g1", 0, 2), (1, "g1", 0, 0), (2, "g2", 0, 1), (3, "g2", 0, 3)]

    listed = http.get("/v1/topics").json()["topics"]
    stats = next(t for t in listed if t["topic"] == "Stats")
    assert (stats["read_queue_nums"], stats["write_queue_nums"], stats["system"]) == (4, 4, False)

    seek = http.get(
        "/v1/topics/Stats/queues/3/offset", params={"timestamp": 0, "boundary": "lower"}
    )
    assert seek.status_code == 200, seek.text
    assert (seek.json()["queue_id"], seek.json()["offset"], seek.json()["max_offset"]) == (3, 0, 3)
    assert (
        http.get("/v1/topics/Stats/queues/9/offset", params={"timestamp": 0}).json()["code"]
        == "QUEUE_NOT_FOUND"
    )
    assert http.get("/v1/topics/Nope").json()["code"] == "TOPIC_NOT_FOUND"


def test_a_group_that_does_not_answer_makes_the_topic_503_not_a_shorter_list(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Partial", 4)
    cluster.b.stop()
    down = http.get("/v1/topics/Partial")
    assert down.status_code == 503, down.text
    assert down.json()["code"] == "BROKER_UNAVAILABLE"
    assert down.headers["retry-after"] == "1"
    # the offsets of g1's queues still answer
    assert http.get("/v1/topics/Partial/queues/0/offset", params={"timestamp": 0}).is_success


@pytest.mark.parametrize(
    "query",
    [
        b"",
        b"offset=3&max_messages=32",
        b"offset=3&wait_ms=100",
        b"wait_ms",
        b"commit_offset=4&offset=4",
        b"wait%5Fms=5",
        b"commit%5foffset=1",
        b"x=wait_ms",
        b"commit_offset_x=1",
        b"a=%20&b=1",
        b"wait+ms=1",
    ],
)
def test_a_query_is_parsed_for_a_pull_whenever_it_may_name_the_parameter(query: bytes) -> None:
    names = {k for k, _ in parse_qsl(query.decode("latin-1"), keep_blank_values=True)}
    for name in ("wait_ms", "commit_offset"):
        if name in names:
            assert may_name(query, name.encode())
