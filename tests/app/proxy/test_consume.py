"""Consumer groups through the proxy (:mod:`app.proxy.consume`): group pulls shared out over the
broker groups hosting a topic and merged, their long-polls, auto-commits that commit only what
was delivered, commits split per group, and a group's config on every master."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.datastructures import QueryParams
from starlette.requests import Request

from app.errors import ApiError
from app.proxy.consume import pull_group
from app.proxy.context import DEFAULT_MAX_MESSAGES, Proxy, ProxyLimits, int_param, params_without
from app.proxy.fanout import BudgetShares
from app.proxy.forward import Forwarder
from app.proxy.upstream import UpstreamAnswer
from app.settings import MAX_PULL_MESSAGES, MAX_WAIT_MS
from services.cluster import (
    BrokerMember,
    ClusterView,
    GroupRoute,
    QueueRoute,
    SendPicker,
    TopicRoute,
)
from tests.app.proxy.support import (
    Cluster,
    FaultyHop,
    create_topic,
    is_problem,
    member,
    probe_drained_groups_once,
    put_members,
    send,
    two_groups,
)
from tests.conftest import wait_until


def group_pull(http: httpx.Client, group: str, topic: str, **params: Any) -> dict[str, Any]:
    answer = http.get(f"/v1/groups/{group}/topics/{topic}/messages", params=params)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def bodies(answer: dict[str, Any]) -> list[str]:
    return [m["body"] for m in answer["messages"]]


def test_group_pulls_drain_every_group_exactly_once(cluster: Cluster) -> None:
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
        answer = group_pull(http, "Workers", "Drain", max_messages=7)
        assert len(answer["messages"]) <= 7
        if not answer["messages"]:
            break
        assert all(
            m["broker_group"] == ("g1" if m["queue_id"] < 4 else "g2") for m in answer["messages"]
        )
        seen += bodies(answer)
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
        parked = group_pull(http, "Workers", "Drain", wait_ms=20000)
        late.join()
    assert bodies(parked) == ["late"]
    queues = group_pull(http, "Workers", "Drain")["queues"]
    assert {q["queue_id"] for q in queues if q["topic"] == "Drain"} == set(range(8))


def test_an_auto_commit_long_poll_commits_only_what_it_delivered(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Parked")
    assert http.put("/v1/groups/Sleepers", json={}).status_code in (200, 201)
    late = threading.Timer(0.3, lambda: send(http_other, "Parked", "wake"))
    with httpx.Client(base_url=cluster.proxy.url, timeout=40) as http_other:
        late.start()
        parked = group_pull(http, "Sleepers", "Parked", wait_ms=20000, auto_commit="true")
        late.join()
    assert bodies(parked) == ["wake"]
    # committed by the proxy once the race was decided: not delivered again
    assert bodies(group_pull(http, "Sleepers", "Parked", auto_commit="true")) == []
    send(http, "Parked", "next")
    assert bodies(group_pull(http, "Sleepers", "Parked", auto_commit="true")) == ["next"]


def readable_on_b(cluster: Cluster, topic: str, readable: bool) -> None:
    perm = 6 if readable else 2  # 2: write only
    answer = httpx.put(
        f"{cluster.b.url}/v1/topics/{topic}",
        json={"write_queue_nums": 2, "read_queue_nums": 2, "perm": perm},
        timeout=10,
    )
    assert answer.status_code in (200, 201), answer.text


def test_an_auto_commit_pull_one_group_refuses_still_delivers_the_other_groups(
    cluster: Cluster,
) -> None:
    """The delivering broker committed what it gave: an answer of the refusal alone would lose
    those messages."""
    http = cluster.http
    create_topic(http, "Half", 4)  # queues 0, 1 on g1; 2, 3 on g2
    assert http.put("/v1/groups/Readers", json={}).status_code in (200, 201)
    send(http, "Half", "on-g1", queue_id=0)
    readable_on_b(cluster, "Half", readable=False)
    params: dict[str, str | int] = {"auto_commit": "true", "max_messages": 8}
    pulled = http.get("/v1/groups/Readers/topics/Half/messages", params=params)
    readable_on_b(cluster, "Half", readable=True)
    delivered = [m["body"] for m in pulled.json().get("messages", [])]
    delivered += bodies(group_pull(http, "Readers", "Half", **params))
    assert delivered == ["on-g1"], (pulled.status_code, pulled.text)


def test_a_group_pull_of_less_than_one_message_is_the_brokers_refusal(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Neg", 4)
    send(http, "Neg", "x", queue_id=2)
    for budget in (-1, 0):
        answer = http.get("/v1/groups/N/topics/Neg/messages", params={"max_messages": budget})
        is_problem(answer, 422, "VALIDATION_FAILED")
    not_a_number = http.get("/v1/groups/N/topics/Neg/messages", params={"max_messages": "x"})
    is_problem(not_a_number, 422, "VALIDATION_FAILED")
    assert bodies(group_pull(http, "N", "Neg")) == ["x"]  # nothing was delivered before


def fill_both_groups(http: httpx.Client, topic: str, each: int) -> None:
    """``topic`` on both groups (g1 hosts 0, 1; g2 hosts 2, 3), ``each`` messages in each."""
    create_topic(http, topic, 4)
    for i in range(each):
        for queue_id in (0, 2):
            send(http, topic, f"{queue_id}-{i}", queue_id=queue_id)


def test_each_group_pull_starts_its_groups_one_further_on(cluster: Cluster) -> None:
    """The group given the odd message of a budget — and listed first — changes from one pull
    to the next: no group always comes last."""
    http = cluster.http
    fill_both_groups(http, "Turn", 4)

    def first_group() -> str:
        answer = group_pull(http, "T", "Turn", max_messages=3)
        groups = [m["broker_group"] for m in answer["messages"]]
        assert len(groups) == 3
        assert groups.count(groups[0]) == 2  # the first group asked has the odd message
        return str(groups[0])

    firsts = [first_group() for _ in range(4)]

    assert firsts[0] != firsts[1] and firsts[1] != firsts[2] and firsts[2] != firsts[3], firsts


def fill_g1_in_full_shares(http: httpx.Client) -> None:
    """Topic Fan with 13 messages in g1, pulled in four rounds each filled to its share: one
    evenly shared (g2, with nothing, is drained), one with g2's probe, two of g1 alone. The
    next round asks g1 alone and finds it empty."""
    create_topic(http, "Fan", 4)  # g1 hosts 0, 1; g2 hosts 2, 3
    for i in range(13):
        send(http, "Fan", f"a{i}", queue_id=0)
    delivered: list[str] = []
    for _ in range(4):
        delivered += bodies(group_pull(http, "G", "Fan", max_messages=4, auto_commit="true"))
    assert sorted(delivered) == sorted(f"a{i}" for i in range(13))


def test_a_first_round_that_finds_nothing_goes_on_to_the_group_left(cluster: Cluster) -> None:
    http = cluster.http
    probe_drained_groups_once(cluster)
    fill_g1_in_full_shares(http)
    for i in range(3):
        send(http, "Fan", f"b{i}", queue_id=2)

    # g1 has nothing: the round goes on to g2, in the same pull
    got = bodies(group_pull(http, "G", "Fan", max_messages=4, auto_commit="true"))

    assert sorted(got) == ["b0", "b1", "b2"]


@pytest.mark.parametrize("arrives_at", ["g1", "g2"])
def test_a_long_poll_after_an_empty_first_round_gets_what_arrives(
    cluster: Cluster, arrives_at: str
) -> None:
    """Whichever group it arrives at: the one asked first or the one left."""
    http = cluster.http
    probe_drained_groups_once(cluster)
    fill_g1_in_full_shares(http)
    broker = cluster.a if arrives_at == "g1" else cluster.b
    late = threading.Timer(
        0.3,
        lambda: httpx.post(
            f"{broker.url}/v1/topics/Fan/messages", json={"body": "late", "queue_id": 1}
        ),
    )
    late.start()
    try:
        parked = group_pull(http, "G", "Fan", max_messages=4, auto_commit="true", wait_ms=10_000)
    finally:
        late.join()
    assert bodies(parked) == ["late"]
    assert [m["broker_group"] for m in parked["messages"]] == [arrives_at]
    # committed where it was delivered
    assert bodies(group_pull(http, "G", "Fan", max_messages=4, auto_commit="true")) == []


@pytest.fixture
def quick_retries(tmp_path: Path) -> Iterator[Cluster]:
    """The cluster, with a message sent back returning after a second (delay level 1)."""
    yield from two_groups(tmp_path, message_delay_levels=" ".join(["1s"] * 18))


def test_a_message_sent_back_comes_through_the_proxy_from_its_retry_queue(
    quick_retries: Cluster,
) -> None:
    """Its retry queue is the group's own: the message keeps that queue's id, and names the
    group that holds it; the commit of that queue goes back there."""
    http = quick_retries.http
    create_topic(http, "Again")  # 4-7 are g2's 0-3
    receipt = send(http, "Again", "fails once", queue_id=6)
    assert bodies(group_pull(http, "R", "Again", auto_commit="true")) == ["fails once"]
    back = httpx.post(
        f"{quick_retries.b.url}/v1/groups/R/retry",
        json={"msg_id": receipt["msg_id"], "delay_level": 1},
        timeout=10,
    )
    assert back.status_code == 200, back.text

    found: list[dict[str, Any]] = []

    def returned() -> bool:
        answer = group_pull(http, "R", "Again")
        found[:] = [answer]
        return bool(answer["messages"])

    wait_until(returned, timeout=30)
    [answer] = found
    [message] = answer["messages"]
    assert (message["body"], message["queue_topic"]) == ("fails once", "%RETRY%R")
    assert (message["queue_id"], message["broker_group"]) == (0, "g2")
    [retry_queue] = [q for q in answer["queues"] if q["topic"] == "%RETRY%R"]
    assert (retry_queue["queue_id"], retry_queue["broker_group"]) == (0, "g2")
    commit = {k: retry_queue[k] for k in ("topic", "queue_id", "broker_group")}
    committed = http.post(
        "/v1/groups/R/offsets", json={"offsets": [{**commit, "offset": retry_queue["next_offset"]}]}
    )
    assert committed.status_code == 200, committed.text
    assert bodies(group_pull(http, "R", "Again")) == []


# ================================================================ a group pull whose answer is lost


def test_a_group_pull_not_answered_goes_on_to_the_group_left_not_to_the_same_broker(
    cluster: Cluster, hop: FaultyHop
) -> None:
    """With auto_commit a group's only reader is its master; one that gives no answer may
    have committed what it found, so it is not asked again: the round goes on to the groups
    left."""
    http = cluster.http
    probe_drained_groups_once(cluster)
    for i in range(8):
        send(http, "Hopped", f"m{i}", queue_id=2)

    def pulled() -> list[str]:
        return bodies(group_pull(http, "G", "Hopped", max_messages=2, auto_commit="true"))

    # shared evenly (g1 has nothing and is drained), g1's one probe, g2 alone
    assert len(pulled() + pulled() + pulled()) == 4
    asked = hop.requests
    hop.plan.append("lose")  # g2 commits two more; its answer never reaches the proxy

    assert pulled() == []  # g1, the group left, had nothing
    assert hop.requests == asked + 1  # g2 was not asked again


def test_a_group_pull_not_answered_is_read_from_the_groups_slave(
    cluster: Cluster, hop: FaultyHop
) -> None:
    """Without auto_commit a group's master that gives no answer is followed, in the same
    round, by the group's slave; the master is not asked again."""
    http = cluster.http
    probe_drained_groups_once(cluster)
    for i in range(4):
        send(http, "Hopped", f"m{i}", queue_id=2)
    # b itself, as g2's slave (etcd's word is all the proxy has): the reader after the master.
    put_members(cluster.etcd.url, {}, member("b-replica", "g2", cluster.b, "slave"))
    wait_until(lambda: http.get("/healthz").json()["slaves"].get("g2") == ["b-replica"])
    for _ in range(3):  # shared evenly (g1 drained), g1's probe, g2 alone
        group_pull(http, "G", "Hopped", max_messages=2)
    asked = hop.requests
    hop.plan.append("lose")

    read = group_pull(http, "G", "Hopped", max_messages=2)

    assert bodies(read) == ["m0", "m1"]  # from the slave
    assert {m["queue_id"] for m in read["messages"]} == {2}
    assert hop.requests == asked + 1  # the master was not asked again


# ================================================================ commits and configs


def test_a_commit_of_one_queue_reaches_its_group_and_answers_its_cluster_wide_id(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Commit")  # 4-7 are g2's 0-3
    for i in range(3):
        send(http, "Commit", f"c{i}", queue_id=6)
    committed = http.put("/v1/groups/C/topics/Commit/queues/6/offset", json={"offset": 2})
    assert committed.status_code == 200, committed.text
    assert committed.json()["offsets"] == [{"topic": "Commit", "queue_id": 6, "offset": 2}]
    on_b = httpx.get(f"{cluster.b.url}/v1/groups/C/offsets", params={"topic": "Commit"}).json()
    [on_topic] = on_b["topics"]
    assert [(q["queue_id"], q["committed_offset"]) for q in on_topic["queues"]] == [(2, 2)]
    assert bodies(group_pull(http, "C", "Commit")) == ["c2"]
    missing = http.put("/v1/groups/C/topics/Commit/queues/8/offset", json={"offset": 0})
    is_problem(missing, 404, "QUEUE_NOT_FOUND")


def test_commits_are_split_per_group_and_checked_first(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Split", 4)  # 0, 1 on g1; 2, 3 on g2 (its 0, 1)
    for queue_id in range(4):
        send(http, "Split", f"s{queue_id}", queue_id=queue_id)
    offsets = [{"topic": "Split", "queue_id": q, "offset": 1} for q in (1, 3)]
    committed = http.post("/v1/groups/S/offsets", json={"offsets": offsets})
    assert committed.status_code == 200, committed.text
    assert committed.json() == {"group": "S", "offsets": offsets}
    assert sorted(bodies(group_pull(http, "S", "Split"))) == ["s0", "s2"]
    mistakes: list[dict[str, Any]] = [{}, {"offsets": []}, {"offsets": [1]}, {"offsets": "x"}]
    for bad in mistakes:
        is_problem(http.post("/v1/groups/S/offsets", json=bad), 422, "VALIDATION_FAILED")
    unrouted = [{"topic": "Split", "queue_id": 9, "offset": 1}]
    is_problem(
        http.post("/v1/groups/S/offsets", json={"offsets": unrouted}), 404, "QUEUE_NOT_FOUND"
    )


def test_a_groups_config_is_put_on_every_master_and_deleted_from_each(cluster: Cluster) -> None:
    http = cluster.http
    created = http.put("/v1/groups/Everywhere", json={"retry_max_times": 3})
    assert created.status_code == 201, created.text
    for live in (cluster.a, cluster.b):
        on_broker = httpx.get(f"{live.url}/v1/groups/Everywhere", timeout=10)
        assert on_broker.json()["retry_max_times"] == 3
    assert http.delete("/v1/groups/Everywhere").status_code == 204
    for live in (cluster.a, cluster.b):
        assert httpx.get(f"{live.url}/v1/groups/Everywhere", timeout=10).status_code == 404


# ================================================================ the query a broker group gets

TOPIC = "Asked"
MASTER = BrokerMember("a", "g1", "http://127.0.0.1:8081", "127.0.0.1:1", "master")
VIEW = ClusterView(
    "c1",
    1,
    {"g1": GroupRoute("g1", 1, MASTER)},
    {TOPIC: TopicRoute(TOPIC, tuple(QueueRoute(q, "g1", q) for q in range(4)))},
)
NUMBERS = ("max_messages", "wait_ms")
BROKER_DEFAULTS = {"max_messages": "32", "wait_ms": "0"}


class _Recorder:
    """A broker group that finds nothing and keeps the query strings it was sent."""

    def __init__(self) -> None:
        self.queries: list[bytes] = []

    async def request(
        self, origin: object, head: bytes, body: object, timeout_s: float
    ) -> UpstreamAnswer:
        target = head[head.index(b" ") + 1 : head.index(b" HTTP/1.1\r\n")]
        self.queries.append(target.partition(b"?")[2])
        empty = {"group": "G", "topic": TOPIC, "messages": [], "queues": []}
        return UpstreamAnswer(200, [(b"content-type", b"application/json")], orjson.dumps(empty))


def request_for(query: bytes, recorder: _Recorder) -> Request:
    parts = Proxy(
        ProxyLimits(),
        SimpleNamespace(view=VIEW),  # type: ignore[arg-type]
        Forwarder(recorder),  # type: ignore[arg-type]
        SendPicker(),
        BudgetShares(),
    )
    scope = {
        "type": "http",
        "method": "GET",
        "headers": [],
        "query_string": query,
        "app": SimpleNamespace(state=SimpleNamespace(proxy=parts)),
        "state": {},
    }
    return Request(scope)


def as_read(query: bytes) -> dict[str, list[str]]:
    """What a broker reads of a group pull's query: every value of each name, and of the two
    numbers the last one (its default when there is none)."""
    params = QueryParams(query)
    read = {name: params.getlist(name) for name in params}
    for name in NUMBERS:
        read[name] = read[name][-1:] if name in read else [BROKER_DEFAULTS[name]]
    return read


def rebuilt(request: Request, wait_ms: int = 0, commit: bool = True) -> bytes:
    """The query of a group pull's whole budget, built from the client's parameters: no wait
    (or, for the long-poll that follows an empty answer, the client's wait and no commit)."""
    budget = int_param(request, "max_messages", DEFAULT_MAX_MESSAGES)
    params = params_without(request, *NUMBERS)
    query = [*params, ("max_messages", str(budget)), ("wait_ms", str(wait_ms))]
    if not commit:
        query = [(k, v) for k, v in query if k != "auto_commit"]
    return urlencode(query).encode()


async def asked(query: bytes) -> list[bytes] | None:
    """The query strings the broker group got; None when the proxy answered by itself: the
    first number it cannot read, named as :func:`int_param` names it."""
    recorder = _Recorder()
    try:
        await pull_group("G", TOPIC, request_for(query, recorder))
    except ApiError as exc:
        with pytest.raises(ApiError) as expected:
            request = request_for(query, _Recorder())
            for name in NUMBERS:
                int_param(request, name, 0)
        assert (exc.code, exc.detail) == (expected.value.code, expected.value.detail)
        assert recorder.queries == []
        return None
    return recorder.queries


names = st.sampled_from(
    ["max_messages", "wait_ms", "auto_commit", "tags", "max%5Fmessages", "wait%5Fms", "x+y"]
)
values = st.sampled_from(
    ["32", "1", "7", "0", "-1", "032", "+32", " 32", "%33%32", "", "true", "a+b", "%C3%A9", "\xe9"]
)
queries = st.lists(st.tuples(names, values), max_size=5).map(
    lambda items: "&".join(f"{k}={v}" for k, v in items).encode("latin-1")
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=queries)
async def test_a_broker_reads_the_query_the_proxy_read(query: bytes) -> None:
    """Whether the client's query string is passed on as it came (the usual pull) or built
    again (numbers written otherwise, named twice), the broker reads what the proxy read."""
    sent = await asked(query)
    if sent is None:  # a number the proxy cannot read: it answers, nothing is forwarded
        return
    request = request_for(query, _Recorder())
    wait_ms = int_param(request, "wait_ms", 0)
    budget = int_param(request, "max_messages", DEFAULT_MAX_MESSAGES)
    if not (1 <= budget <= MAX_PULL_MESSAGES and 0 <= wait_ms <= MAX_WAIT_MS):
        # out of a pull's bounds: the broker says why
        assert sent == [sent[0]] and as_read(sent[0]) == as_read(rebuilt(request, wait_ms))
        return
    assert as_read(sent[0]) == as_read(rebuilt(request))
    if len(sent) > 1:  # nothing found: the long-poll
        assert wait_ms > 0 and sent[1:] == [rebuilt(request, wait_ms, commit=False)]


async def test_the_usual_pull_passes_the_clients_query_on_as_it_came() -> None:
    for query in (
        b"",
        b"max_messages=32",
        b"max_messages=5&auto_commit=true",
        b"tags=A%7C%7CB&wait_ms=0&max_messages=8",
    ):
        assert await asked(query) == [query]
    for query in (b"max_messages=032", b"max_messages=5&max_messages=6", b"wait_ms=00"):
        sent = await asked(query)
        assert sent is not None and sent[0] != query
