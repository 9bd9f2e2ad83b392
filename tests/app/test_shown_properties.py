"""What a reader is shown of a message's properties, over HTTP: the broker's bookkeeping (the
key of its own re-puts, a transaction's kept delay, which delivery a POP copy replaces) stays
in the records and never reaches a pull, a group pull, a POP receive, a lookup, the DLQ list or
the admin pages.

One server holds a message of each kind the broker re-puts with a key: a committed
transactional message, a delayed one, a sent-back (retried) one, a dead letter redriven to its
topic, and a POP delivery revived into the group's retry topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from storage.record.properties import BOOKKEEPING_PROPERTIES
from tests.conftest import LiveServer, start_server, wait_until

Json = dict[str, Any]

DELAYS = " ".join(["1s"] * 18)  # every delay level is 1 s: delays and retries come back fast
KINDS = ("committed", "delayed", "retried", "redriven", "revived")


@dataclass(frozen=True)
class World:
    """The server and the names of the messages it holds."""

    live: LiveServer
    topic: str  # committed, delayed, retried (its original), redriven
    pop_topic: str  # the POP group's topic: revived
    group: str  # sent back the retried message and dead-lettered the redriven one
    pop_group: str

    def client(self) -> httpx.Client:
        return self.live.client()


def url(topic: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}"


def pull(client: httpx.Client, topic: str) -> list[Json]:
    answer = client.get(f"{url(topic)}/queues/0/messages", params={"offset": 0})
    assert answer.status_code == 200, answer.text
    messages: list[Json] = answer.json()["messages"]
    return messages


def by_key(messages: list[Json]) -> dict[str, Json]:
    return {m["keys"][0]: m for m in messages}


def assert_no_bookkeeping(messages: list[Json]) -> None:
    assert messages
    for message in messages:
        properties = message["properties"]
        assert not BOOKKEEPING_PROPERTIES & properties.keys(), properties
        assert "IDEMPOTENCY_KEY" not in properties and "POP_CK" not in properties
        assert not any(value.startswith("re-put ") for value in properties.values())


def one_queue(client: httpx.Client, topic: str) -> None:
    answer = client.put(f"/v1/topics/{topic}", json={"read_queue_nums": 1, "write_queue_nums": 1})
    assert answer.status_code in (200, 201), answer.text


def send(client: httpx.Client, topic: str, key: str, **message: Any) -> Json:
    answer = client.post(
        f"/v1/topics/{topic}/messages", json={"body": key, "keys": [key], **message}
    )
    assert answer.status_code == 201, answer.text
    receipt: Json = answer.json()["messages"][0]
    return receipt


def retry(client: httpx.Client, group: str, msg_id: str, delay_level: int) -> None:
    answer = client.post(
        f"/v1/groups/{group}/retry", json={"msg_id": msg_id, "delay_level": delay_level}
    )
    assert answer.status_code == 200, answer.text


def commit_transaction(client: httpx.Client, topic: str, key: str) -> None:
    half = client.post(
        f"/v1/topics/{topic}/transactions",
        json={"producer_group": "pg", "message": {"body": key, "keys": [key]}},
    )
    assert half.status_code == 201, half.text
    ended = client.post(
        f"/v1/transactions/{half.json()['transaction_id']}/commit", json={"producer_group": "pg"}
    )
    assert ended.status_code == 200, ended.text


def receive(client: httpx.Client, group: str, topic: str, **options: Any) -> list[Json]:
    answer = client.post(f"/v1/groups/{group}/topics/{topic}/receive", json=options)
    assert answer.status_code == 200, answer.text
    messages: list[Json] = answer.json()["messages"]
    return messages


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    live = start_server(
        tmp_path_factory.mktemp("store"),
        message_delay_levels=DELAYS,
        transaction_timeout_ms=600_000,
        transaction_check_interval_ms=600_000,
    )
    suffix = uuid.uuid4().hex[:10]
    world = World(live, f"T_{suffix}", f"P_{suffix}", f"G_{suffix}", f"PG_{suffix}")
    try:
        fill(world)
        yield world
    finally:
        live.stop()


def fill(world: World) -> None:
    """A message of every kind, each once delivered or re-put where a reader finds it."""
    client = world.client()
    topic, group = world.topic, world.group
    for name in (topic, world.pop_topic):
        one_queue(client, name)
    commit_transaction(client, topic, "committed")
    send(client, topic, "delayed", delay_level=1)
    retry(client, group, send(client, topic, "retried")["msg_id"], delay_level=1)
    retry(client, group, send(client, topic, "redriven")["msg_id"], delay_level=-1)
    redrive = client.post(f"/v1/groups/{group}/dlq/redrive", json={})
    assert redrive.json()["summary"]["moved"] == 1, redrive.text
    send(client, world.pop_topic, "revived")
    [taken] = receive(client, world.pop_group, world.pop_topic, invisible_ms=1000)
    assert taken["delivery_attempt"] == 1  # and never acked: revived into the retry topic
    wait_until(lambda: "delayed" in by_key(pull(client, topic)))
    wait_until(lambda: client.get(url(f"%RETRY%{group}")).status_code == 200)
    wait_until(lambda: "retried" in by_key(pull(client, f"%RETRY%{group}")))
    wait_until(lambda: client.get(url(f"%RETRY%{world.pop_group}")).status_code == 200)
    wait_until(lambda: "revived" in by_key(pull(client, f"%RETRY%{world.pop_group}")))


def stored_copies(world: World) -> dict[str, Json]:
    """Each kind's message as read, from the topic a reader finds it in."""
    client = world.client()
    in_topic = by_key(pull(client, world.topic))
    retried = by_key(pull(client, f"%RETRY%{world.group}"))["retried"]
    revived = by_key(pull(client, f"%RETRY%{world.pop_group}"))["revived"]
    redriven = [m for m in pull(client, world.topic) if "REDRIVEN_FROM" in m["properties"]]
    return {
        "committed": in_topic["committed"],
        "delayed": in_topic["delayed"],
        "retried": retried,
        "redriven": redriven[0],
        "revived": revived,
    }


def test_every_kind_of_record_carries_the_bookkeeping_the_reader_is_not_shown(
    world: World,
) -> None:
    """The premise: each of these records holds a re-put key (and a revived one its POP_CK)."""
    store = world.live.broker._store
    assert store is not None
    for kind, message in stored_copies(world).items():
        msg_id: str = message["msg_id"]
        record = world.live.call(partial(store.look_message_by_id, msg_id))
        assert record is not None
        assert record.properties["IDEMPOTENCY_KEY"].startswith("re-put "), kind
        if kind == "revived":
            assert "POP_CK" in record.properties


def test_pulls_show_no_bookkeeping(world: World) -> None:
    client = world.client()
    for topic in (world.topic, f"%RETRY%{world.group}", f"%RETRY%{world.pop_group}"):
        assert_no_bookkeeping(pull(client, topic))
    assert_no_bookkeeping(pull(client, f"%DLQ%{world.group}"))
    committed = stored_copies(world)["committed"]
    assert committed["properties"]["PGROUP"] == "pg"  # RocketMQ's own properties stay
    assert committed["properties"]["__transactionId__"] == committed["properties"]["UNIQ_KEY"]


def test_group_pulls_show_no_bookkeeping_and_read_the_retry_topic(world: World) -> None:
    client = world.client()
    answer = client.get(
        f"/v1/groups/{world.group}/topics/{world.topic}/messages", params={"max_messages": 100}
    )
    assert answer.status_code == 200, answer.text
    messages = answer.json()["messages"]
    assert_no_bookkeeping(messages)
    retried = [m for m in messages if m.get("queue_topic") == f"%RETRY%{world.group}"]
    assert [m["body"] for m in retried] == ["retried"]
    assert retried[0]["properties"]["RETRY_TOPIC"] == world.topic


def test_pop_receives_show_no_bookkeeping(world: World) -> None:
    client = world.client()
    revived = receive(client, world.pop_group, world.pop_topic, wait_ms=10_000)
    assert [(m["body"], m["delivery_attempt"]) for m in revived] == [("revived", 2)]
    assert_no_bookkeeping(revived)
    everything = receive(client, f"{world.pop_group}_all", world.topic, max_messages=32)
    assert {m["body"] for m in everything} >= {"committed", "delayed", "redriven"}
    assert_no_bookkeeping(everything)


def test_lookups_dlq_lists_and_admin_pages_show_no_bookkeeping(world: World) -> None:
    client = world.client()
    for kind, message in stored_copies(world).items():
        found = client.get(f"/v1/messages/{message['msg_id']}")
        assert found.status_code == 200, found.text
        assert_no_bookkeeping([found.json()])
        page = client.get(f"/admin/messages/{message['msg_id']}")
        assert page.status_code == 200, page.text
        assert "IDEMPOTENCY" not in page.text and "re-put " not in page.text, kind
        assert "POP_CK" not in page.text, kind
    for topic, key in ((world.topic, "committed"), (f"%RETRY%{world.pop_group}", "revived")):
        keyed = client.get(f"{url(topic)}/messages", params={"key": key})
        assert_no_bookkeeping(keyed.json()["messages"])
    dead = client.get(f"/v1/groups/{world.group}/dlq/messages", params={"state": "all"})
    assert_no_bookkeeping(dead.json()["messages"])
