"""The lean lane's first round of a group pull or POP receive (app.proxy.lean_fanout) against
the endpoint's way, at its edges: bad input, the rotation of the groups, what the lane takes
from the upstream pool, and a round whose answer is lost.

Real etcd, real brokers, the proxy on uvicorn in this process (its pool is looked at directly:
a slot not given back shows nowhere else until all of them are gone)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from app.proxy.upstream import Upstream
from services.cluster import BrokerMember
from tests.app.test_proxy import Cluster, create_topic, member, put_members, two_groups
from tests.app.test_proxy_lean import FaultyHop, probe_rarely
from tests.app.test_proxy_lean_review import upstream_of
from tests.conftest import LiveServer, wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


def fill_both_groups(http: httpx.Client, topic: str, each: int) -> None:
    """``topic`` on both groups (g1 hosts 0, 1; g2 hosts 2, 3), ``each`` messages in each."""
    create_topic(http, topic, 4)
    for i in range(each):
        for queue_id in (0, 2):
            sent = http.post(
                f"/v1/topics/{topic}/messages",
                json={"body": f"{queue_id}-{i}", "queue_id": queue_id},
            )
            assert sent.status_code == 201, sent.text


def test_a_group_pull_of_a_negative_max_messages_is_the_brokers_refusal(cluster: Cluster) -> None:
    """The endpoint's way passes a budget under 1 to a broker, which says what is wrong with
    it (422); the lane's shares of -1 among two groups are one message of the first."""
    http = cluster.http
    fill_both_groups(http, "Neg", 2)
    for _ in range(2):  # both brokers' connections warm, idle
        warm = http.get("/v1/groups/W/topics/Neg/messages", params={"max_messages": 4})
        assert warm.status_code == 200, warm.text

    answer = http.get("/v1/groups/N/topics/Neg/messages", params={"max_messages": -1})

    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")


def test_a_round_the_lean_lane_does_not_take_turns_the_groups_once(cluster: Cluster) -> None:
    """Every shared-out request starts its groups one further on (fanout.rotated), so the
    group given the odd message of a budget — and listed first — changes from one pull to the
    next; a round that asks both groups goes the endpoint's way, and must not turn twice."""
    http = cluster.http
    fill_both_groups(http, "Turn", 4)

    def first_group() -> str:
        answer = http.get("/v1/groups/T/topics/Turn/messages", params={"max_messages": 3})
        assert answer.status_code == 200, answer.text
        groups = [m["broker_group"] for m in answer.json()["messages"]]
        assert len(groups) == 3
        assert groups.count(groups[0]) == 2  # the first group asked has the odd message
        return str(groups[0])

    firsts = [first_group() for _ in range(4)]

    assert firsts[0] != firsts[1] and firsts[1] != firsts[2] and firsts[2] != firsts[3], firsts


def origin_of(url: str) -> tuple[str, int]:
    split = urlsplit(url)
    assert split.hostname is not None and split.port is not None
    return split.hostname, split.port


def slots_free(upstream: Upstream, live: LiveServer) -> bool:
    slots = upstream._slots.get(origin_of(live.url))
    return slots is not None and slots.free == upstream.max_per_origin


def deep_receive(depth: int) -> bytes:
    """A receive whose body holds a member nested deeper than the proxy can encode again
    (orjson reads 1024 levels but writes 254)."""
    return b'{"max_messages":1,"invisible_ms":1500,"x":' + b"[" * depth + b"]" * depth + b"}"


def test_a_receive_too_deep_to_encode_again_gives_its_connection_and_slot_back(
    cluster: Cluster,
) -> None:
    http = cluster.http
    fill_both_groups(http, "DeepPop", 1)
    upstream = upstream_of(cluster)
    for _ in range(2):  # both brokers' connections warm, idle
        warm = http.post("/v1/groups/W/topics/DeepPop/receive", json={"max_messages": 4})
        assert warm.status_code == 200, warm.text
    wait_until(lambda: slots_free(upstream, cluster.a) and slots_free(upstream, cluster.b))

    # A budget of 1 among two groups: one group asked, the lean lane's round.
    failed = http.post(
        "/v1/groups/D/topics/DeepPop/receive",
        content=deep_receive(300),
        headers={"content-type": "application/json"},
    )

    assert failed.status_code == 500, failed.text  # the endpoint's way cannot encode it either
    # What the lane took (nothing was written on it) is back: a slot kept is kept for good,
    # and with max_per_origin of them kept every request to that broker gets 503.
    wait_until(lambda: slots_free(upstream, cluster.a) and slots_free(upstream, cluster.b), 2)


@pytest.fixture
def hop(cluster: Cluster) -> Iterator[FaultyHop]:
    """g2's master is reached through a FaultyHop, for topic Warm: queues 0, 1 on g1; 2, 3
    on g2."""
    create_topic(cluster.http, "Warm", 4)
    hop = FaultyHop(cluster.b.url)
    put_members(cluster.etcd.url, {"g2": BrokerMember("b", "g2", hop.url, "127.0.0.1:1")})
    wait_until(
        lambda: (
            cluster.http.get("/v1/topics/Warm/queues/2/messages").status_code == 200
            and hop.requests > 0
        )
    )
    try:
        yield hop
    finally:
        put_members(cluster.etcd.url, {"g2": member("b", "g2", cluster.b)})
        hop.stop()


def test_a_warm_group_pull_not_answered_goes_on_to_the_group_left_not_to_the_same_broker(
    cluster: Cluster, hop: FaultyHop
) -> None:
    """On the endpoint's way a group whose only reader (auto_commit: its master) gives no
    answer is an error of the round, and the round goes on to the groups left; the lean lane
    must not ask that broker again (with auto_commit, a second pull that commits)."""
    http = cluster.http
    probe_rarely(cluster)
    for i in range(8):
        sent = http.post("/v1/topics/Warm/messages", json={"body": f"m{i}", "queue_id": 2})
        assert sent.status_code == 201, sent.text

    def group_pull() -> httpx.Response:
        return http.get(
            "/v1/groups/G/topics/Warm/messages",
            params={"max_messages": 2, "auto_commit": "true"},
        )

    first = group_pull()  # shared evenly: g1 has nothing and is drained
    second = group_pull()  # g1's one probe
    third = group_pull()  # g2 alone: the lean lane
    assert all(a.status_code == 200 for a in (first, second, third))
    assert sum(len(a.json()["messages"]) for a in (first, second, third)) == 4
    asked = hop.requests
    hop.plan.append("lose")  # g2 commits two more; its answer never reaches the proxy

    lost = group_pull()

    assert lost.status_code == 200, lost.text
    assert lost.json()["messages"] == []  # g1, the group left, had nothing
    assert hop.requests == asked + 1  # g2 was not asked again


def test_a_warm_group_pull_not_answered_asks_the_groups_other_readers_not_the_same_again(
    cluster: Cluster, hop: FaultyHop
) -> None:
    """On the endpoint's way a group's reader that gives no answer is followed, in the same
    round, by the group's next reader (a slave); the broker that did not answer is not asked
    again (a hung one would cost the client its timeout twice)."""
    http = cluster.http
    probe_rarely(cluster)
    for i in range(4):
        sent = http.post("/v1/topics/Warm/messages", json={"body": f"m{i}", "queue_id": 2})
        assert sent.status_code == 201, sent.text
    # b itself, as g2's slave (etcd's word is all the proxy has): the reader after the master.
    put_members(cluster.etcd.url, {}, member("b-replica", "g2", cluster.b, "slave"))
    wait_until(lambda: http.get("/healthz").json()["slaves"].get("g2") == ["b-replica"])

    def group_pull() -> httpx.Response:
        return http.get("/v1/groups/G/topics/Warm/messages", params={"max_messages": 2})

    for _ in range(3):  # shared evenly (g1 drained), g1's probe, g2 alone: the lean lane
        assert group_pull().status_code == 200
    asked = hop.requests
    hop.plan.append("lose")

    read = group_pull()

    assert read.status_code == 200, read.text
    assert [m["body"] for m in read.json()["messages"]] == ["m0", "m1"]  # from the slave
    assert hop.requests == asked + 1  # the master was not asked again
