"""A broker's answers in the cluster's terms where a proxy asks for them (:mod:`app.labels`),
through the broker's own HTTP API: asked with ``Spoolmq-Broker-Group`` and
``Spoolmq-Queue-Ids`` it answers sends, pulls, group pulls, receives, key lookups, commits and
changes of invisibility with cluster-wide queue ids, its ``broker_group`` and handles that name
it — and says how many messages a group pull or a receive holds — while an answer nobody asked
to label is as it always was."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.cluster import ClusterLabels
from tests.conftest import LiveServer, start_server

# The broker is group g2 of a topic of 8 queues: its own 0-3 are the cluster's 4-7.
AS_G2 = {"Spoolmq-Broker-Group": "g2", "Spoolmq-Queue-Ids": "0=4,1=5,2=6,3=7"}
LABELS = ClusterLabels("g2", "", {0: 4, 1: 5, 2: 6, 3: 7})
COUNT = "spoolmq-message-count"
# Level n waits n seconds: a message sent back returns within the test.
DELAYS = " ".join(f"{n}s" for n in range(1, 19))

NASTY = [
    "h\u00e9llo w\u00f6rld \u4e2d\u6587 \U0001f600",
    'quote " backslash \\ slash / tab \t newline \n nul \u0000 del \u007f',
    '},{"msg_id":"0000","topic":"T","queue_id":1,"receipt_handle":"x"}',
    '"queue_topic":"%RETRY%x","queue_id":2,],"queues":[{"queue_id":3,',
    " ",  # the shortest body a message may have
]
LOOKALIKES = {"queue_id": "3", "broker_group": "x", "receipt_handle": "mine", "topic": "other"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("store"), message_delay_levels=DELAYS)
    yield live
    live.stop()


@pytest.fixture
def http(broker: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        yield client


@pytest.fixture
def topic(http: httpx.Client, topic: str) -> str:
    """A fresh topic of four queues on the broker."""
    answer = http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 4, "read_queue_nums": 4})
    assert answer.status_code == 201, answer.text
    return topic


def labels_of(topic: str) -> ClusterLabels:
    return ClusterLabels(LABELS.group, topic, LABELS.queue_ids)


def fill(http: httpx.Client, topic: str) -> int:
    """Messages of every kind over the topic's four queues; how many were sent."""
    for index, body in enumerate(NASTY):
        sent = http.post(
            f"/v1/topics/{topic}/messages",
            json={
                "body": body,
                "queue_id": index % 4,
                "tags": body[:20] or None,
                "keys": ["shared", body[:10].replace(" ", "") or "k"],
                "properties": {"plain": "value", **LOOKALIKES},
            },
        )
        assert sent.status_code == 201, sent.text
    raw = http.post(
        f"/v1/topics/{topic}/messages",
        params={"queue_id": 2, "tags": "binary"},
        content=bytes(range(256)),
        headers={"content-type": "application/octet-stream"},
    )
    assert raw.status_code == 201, raw.text
    return len(NASTY) + 1


# ================================================================ sends


def test_a_send_answers_its_cluster_wide_queue_and_its_group(
    http: httpx.Client, topic: str
) -> None:
    url = f"/v1/topics/{topic}/messages"
    plain = http.post(url, json={"body": "a", "queue_id": 2})
    assert plain.status_code == 201
    assert "broker_group" not in plain.json()
    assert plain.json()["messages"][0]["queue_id"] == 2

    labelled = http.post(url, json={"body": "b", "queue_id": 2}, headers=AS_G2)
    assert labelled.status_code == 201, labelled.text
    answer = labelled.json()
    assert next(iter(answer)) == "broker_group"  # in front, as the proxy's receipts are
    assert (answer["broker_group"], answer["topic"]) == ("g2", topic)
    assert [m["queue_id"] for m in answer["messages"]] == [6]
    assert {k: v for k, v in answer.items() if k != "broker_group"}.keys() == plain.json().keys()

    raw = http.post(
        url,
        params={"queue_id": 1},
        content=b"raw",
        headers={**AS_G2, "content-type": "application/octet-stream"},
    )
    assert (raw.json()["broker_group"], raw.json()["messages"][0]["queue_id"]) == ("g2", 5)
    tagged = http.post(
        url, json={"messages": [{"body": "t", "tags": "T"}] * 3, "queue_id": 3}, headers=AS_G2
    )
    assert [m["queue_id"] for m in tagged.json()["messages"]] == [7, 7, 7]


@pytest.mark.parametrize("keyed", [False, True])
def test_a_batch_of_bodies_answers_in_the_clusters_terms(
    http: httpx.Client, topic: str, keyed: bool
) -> None:
    """Bodies alone take the broker's column-wise way, with a key as without."""
    url = f"/v1/topics/{topic}/messages"
    key = {"Idempotency-Key": f"bodies-{topic}"} if keyed else {}
    batch = {"messages": [{"body": f"b{i}"} for i in range(5)], "queue_id": 0}
    first = http.post(url, json=batch, headers={**AS_G2, **key})
    assert first.status_code == 201, first.text
    assert first.json()["broker_group"] == "g2"
    assert [m["queue_id"] for m in first.json()["messages"]] == [4] * 5
    plain = http.post(url, json={**batch, "queue_id": 1})
    assert "broker_group" not in plain.json()
    assert [m["queue_id"] for m in plain.json()["messages"]] == [1] * 5
    if keyed:  # a replay is labelled as the first answer was
        again = http.post(url, json=batch, headers={**AS_G2, **key})
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json()


# ================================================================ pulls and lookups


def test_a_pull_of_one_queue_answers_its_cluster_wide_id(http: httpx.Client, topic: str) -> None:
    fill(http, topic)
    url = f"/v1/topics/{topic}/queues/2/messages"
    plain = http.get(url).json()
    labelled = http.get(url, headers=AS_G2)
    assert COUNT not in labelled.headers
    answer = labelled.json()
    assert answer["queue_id"] == 6 and plain["queue_id"] == 2
    assert [m["queue_id"] for m in answer["messages"]] == [6] * len(plain["messages"])
    for message in plain["messages"]:
        message["queue_id"] = 6
    assert answer == {**plain, "queue_id": 6}


def test_a_group_pull_answers_every_message_and_queue_in_the_clusters_terms(
    http: httpx.Client, topic: str
) -> None:
    sent = fill(http, topic)
    url = f"/v1/groups/Labelled/topics/{topic}/messages"
    plain = http.get(url, params={"max_messages": 32})  # nothing committed: the same again
    labelled = http.get(url, params={"max_messages": 32}, headers=AS_G2)
    assert COUNT not in plain.headers
    assert labelled.headers[COUNT] == str(sent)
    expected = plain.json()
    labels_of(topic).apply(expected["messages"], tag=True)
    labels_of(topic).apply(expected["queues"], tag=True)
    assert in_one_order(labelled.json()) == in_one_order(expected)
    messages = labelled.json()["messages"]
    assert {(m["queue_id"], m["broker_group"]) for m in messages} == {
        (q, "g2") for q in range(4, 8)
    }
    for message in messages:  # the message's own data is not touched
        if "plain" in message["properties"]:
            assert {k: message["properties"][k] for k in LOOKALIKES} == LOOKALIKES
    assert sorted(m["body"] for m in messages if m.get("tags") != "binary") == sorted(NASTY)


def in_one_order(answer: dict[str, Any]) -> dict[str, Any]:
    """A group pull's answer with its messages and queues in one order (the broker starts
    each pull at another queue)."""
    return {
        **answer,
        "messages": sorted(answer["messages"], key=lambda m: (m["queue_id"], m["queue_offset"])),
        "queues": sorted(answer["queues"], key=lambda q: (q["topic"], q["queue_id"])),
    }


def test_an_empty_group_pull_keeps_its_queues(http: httpx.Client, topic: str) -> None:
    labelled = http.get(f"/v1/groups/Idle/topics/{topic}/messages", headers=AS_G2)
    assert labelled.headers[COUNT] == "0"
    answer = labelled.json()
    assert answer["messages"] == []
    assert sorted((q["queue_id"], q["broker_group"]) for q in answer["queues"]) == [
        (q, "g2") for q in range(4, 8)
    ]


def test_a_key_lookup_answers_cluster_wide_ids(http: httpx.Client, topic: str) -> None:
    fill(http, topic)
    url = f"/v1/topics/{topic}/messages"
    plain = http.get(url, params={"key": "shared"}).json()
    labelled = http.get(url, params={"key": "shared"}, headers=AS_G2).json()
    assert len(labelled["messages"]) == len(NASTY)
    labels_of(topic).apply(plain["messages"], tag=False)
    assert labelled == plain
    assert all("broker_group" not in m for m in labelled["messages"])


def test_a_commit_answers_the_queues_cluster_wide_id(http: httpx.Client, topic: str) -> None:
    fill(http, topic)
    url = f"/v1/groups/Committer/topics/{topic}/queues/2/offset"
    labelled = http.put(url, json={"offset": 1}, headers=AS_G2)
    assert labelled.status_code == 200, labelled.text
    assert labelled.json()["offsets"] == [{"topic": topic, "queue_id": 6, "offset": 1}]
    plain = http.put(url, json={"offset": 2})
    assert plain.json()["offsets"] == [{"topic": topic, "queue_id": 2, "offset": 2}]


# ================================================================ POP


def test_a_receive_answers_handles_that_name_the_group(http: httpx.Client, topic: str) -> None:
    sent = fill(http, topic)
    url = f"/v1/groups/Popper/topics/{topic}/receive"
    labelled = http.post(url, json={"max_messages": 32, "invisible_ms": 600_000}, headers=AS_G2)
    assert labelled.status_code == 200, labelled.text
    assert labelled.headers[COUNT] == str(sent)
    messages = labelled.json()["messages"]
    assert len(messages) == sent
    assert {m["queue_id"] for m in messages} <= set(range(4, 8))
    assert all(m["broker_group"] == "g2" for m in messages)
    assert all(m["receipt_handle"].startswith("g2~") for m in messages)
    for message in messages:
        if "plain" in message["properties"]:
            assert message["properties"]["receipt_handle"] == "mine"
    # The broker's own handle is what follows the group: it acks there.
    handles = [m["receipt_handle"].split("~", 1)[1] for m in messages]
    acked = http.post("/v1/groups/Popper/acks", json={"receipt_handles": handles})
    assert [r["outcome"] for r in acked.json()["results"]] == ["acked"] * sent

    http.post(f"/v1/topics/{topic}/messages", json={"body": "plain", "queue_id": 0})
    plain = http.post(url, json={"invisible_ms": 600_000})
    assert COUNT not in plain.headers
    [message] = plain.json()["messages"]
    assert (message["queue_id"], "broker_group" in message) == (0, False)
    assert not message["receipt_handle"].startswith("g2~")


def test_a_change_of_invisibility_answers_a_handle_that_names_the_group(
    http: httpx.Client, topic: str
) -> None:
    http.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 1})
    [got] = http.post(f"/v1/groups/Inv/topics/{topic}/receive", json={}).json()["messages"]
    url = "/v1/groups/Inv/invisibility"
    labelled = http.post(
        url, json={"receipt_handle": got["receipt_handle"], "invisible_ms": 60_000}, headers=AS_G2
    )
    assert labelled.status_code == 200, labelled.text
    handle = labelled.json()["receipt_handle"]
    assert handle.startswith("g2~")
    plain = http.post(url, json={"receipt_handle": handle[3:], "invisible_ms": 60_000})
    assert plain.status_code == 200, plain.text
    assert not plain.json()["receipt_handle"].startswith("g2~")


# ================================================================ retry topics


def until(condition: Any, timeout_s: float = 30) -> Any:
    """The first truthy value of ``condition()``, asked every 0.2 s (a bound on the wait)."""
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, "not within the wait"
        time.sleep(0.2)
    return found


def test_retry_messages_keep_their_own_queue_ids(http: httpx.Client, topic: str) -> None:
    """A message of the group's retry topic, and its queue, are the group's own: their ids are
    not the topic's, and stay as they are; the group is named on them all the same."""
    group = f"R{topic}"
    receipt = http.post(
        f"/v1/topics/{topic}/messages", json={"body": "fails once", "queue_id": 3}
    ).json()["messages"][0]
    url = f"/v1/groups/{group}/topics/{topic}/messages"
    first = http.get(url, params={"auto_commit": "true"})
    assert [m["body"] for m in first.json()["messages"]] == ["fails once"]
    back = http.post(
        f"/v1/groups/{group}/retry", json={"msg_id": receipt["msg_id"], "delay_level": 1}
    )
    assert back.status_code == 200, back.text
    http.post(f"/v1/topics/{topic}/messages", json={"body": "fresh", "queue_id": 3})

    def pulled() -> dict[str, Any] | None:
        answer = http.get(url, headers=AS_G2).json()  # not committed: the same again
        return answer if len(answer["messages"]) == 2 else None

    answer = until(pulled)
    retry = f"%RETRY%{group}"
    by_body = {m["body"]: m for m in answer["messages"]}
    assert (by_body["fails once"]["queue_topic"], by_body["fails once"]["queue_id"]) == (retry, 0)
    assert (by_body["fresh"].get("queue_topic"), by_body["fresh"]["queue_id"]) == (None, 7)
    assert {m["broker_group"] for m in answer["messages"]} == {"g2"}
    queues = {(q["topic"], q["queue_id"]) for q in answer["queues"]}
    assert (retry, 0) in queues and {(topic, q) for q in range(4, 8)} <= queues
    assert all(q["broker_group"] == "g2" for q in answer["queues"])


def test_pop_retries_keep_their_own_queue_ids(http: httpx.Client, topic: str) -> None:
    group = f"P{topic}"
    http.post(f"/v1/topics/{topic}/messages", json={"body": "comes back", "queue_id": 2})
    url = f"/v1/groups/{group}/topics/{topic}/receive"
    [first] = http.post(url, json={"invisible_ms": 1000}).json()["messages"]
    assert first["body"] == "comes back"

    def received() -> list[dict[str, Any]]:
        got = http.post(url, json={"invisible_ms": 600_000}, headers=AS_G2).json()["messages"]
        return [m for m in got if m["body"] == "comes back"]

    [again] = until(received)
    assert again["queue_topic"] == f"%RETRY%{group}"
    assert again["queue_id"] == 0  # the retry queue's own id, not the topic's 4
    assert (again["broker_group"], again["receipt_handle"][:3]) == ("g2", "g2~")


# ================================================================ what is and is not asked


def test_a_group_alone_names_the_answer_and_leaves_the_ids(http: httpx.Client, topic: str) -> None:
    """A group whose local ids are the cluster's: the proxy sends no queue ids."""
    fill(http, topic)
    as_g1 = {"Spoolmq-Broker-Group": "g1"}
    sent = http.post(
        f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 3}, headers=as_g1
    )
    assert (sent.json()["broker_group"], sent.json()["messages"][0]["queue_id"]) == ("g1", 3)
    pulled = http.get(f"/v1/groups/G1/topics/{topic}/messages", headers=as_g1).json()
    assert {m["queue_id"] for m in pulled["messages"]} == {0, 1, 2, 3}
    assert {m["broker_group"] for m in pulled["messages"]} == {"g1"}


@pytest.mark.parametrize("queue_ids", ["0=x", "1", "=4", "0=4,oops", "0=4=5", "1.5=2"])
def test_queue_ids_that_are_not_pairs_of_numbers_are_a_400(
    http: httpx.Client, topic: str, queue_ids: str
) -> None:
    headers = {"Spoolmq-Broker-Group": "g2", "Spoolmq-Queue-Ids": queue_ids}
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("POST", f"/v1/topics/{topic}/messages", {"json": {"body": "x"}}),
        ("GET", f"/v1/topics/{topic}/queues/0/messages", {}),
        ("GET", f"/v1/groups/Bad/topics/{topic}/messages", {}),
        ("POST", f"/v1/groups/Bad/topics/{topic}/receive", {"json": {}}),
        ("GET", f"/v1/topics/{topic}/messages", {"params": {"key": "k"}}),
        ("PUT", f"/v1/groups/Bad/topics/{topic}/queues/0/offset", {"json": {"offset": 0}}),
        (
            "POST",
            "/v1/groups/Bad/invisibility",
            {"json": {"receipt_handle": "h", "invisible_ms": 1000}},
        ),
    ]
    for method, path, kwargs in requests:
        answer = http.request(method, path, headers=headers, **kwargs)
        assert answer.status_code == 400, (path, answer.text)
        problem = answer.json()
        assert problem["code"] == "INVALID_REQUEST"
        assert "Spoolmq-Queue-Ids" in problem["detail"]
    stored = http.get(f"/v1/topics/{topic}").json()["queues"]
    assert all(q["max_offset"] == 0 for q in stored)  # the send was refused before writing
    nothing = http.get("/v1/groups/Bad/offsets")  # the commit was refused before it was kept
    assert (nothing.status_code, nothing.json()["code"]) == (404, "GROUP_NOT_FOUND")
