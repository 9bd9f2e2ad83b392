"""kill -9 between the write and the answer: a retry with the same key answers the original
receipt and the store keeps one copy -- for a keyed send, for a send-back, and for a delayed
message whose delivery is repeated after a crash.

The crash point is made deterministic without anything in the server for tests: a master
with sync replication waits for its in-sync slave before it answers, so with that slave
SIGSTOPped the master has written the message and is still waiting when it is killed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from services import Broker, BrokerConfig, OutgoingMessage, StoreConfig
from services.ha import MasterAddress
from tests.conftest import start_server, wait_until
from tests.net import free_port
from tests.serve_process import ServeProcess

FILE_SIZE = str(4 * 1024 * 1024)


class Spool(ServeProcess):
    """A ``spoolmq serve`` process this test starts, stalls and kills by its PID."""

    def __init__(self, store: Path, *args: str) -> None:
        super().__init__(store, "--commit-log-file-size", FILE_SIZE, *args)

    def stall(self) -> None:
        os.kill(self.process.pid, signal.SIGSTOP)


def replica(url: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{url}/v1/replication", timeout=10).json()
    return answer


def all_messages(client: httpx.Client, topic: str, queues: int = 8) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for queue_id in range(queues):
        answer = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": 0})
        if answer.status_code == 200:
            found += answer.json()["messages"]
    return found


@pytest.mark.slow
def test_kill_9_after_the_write_before_the_answer(tmp_path: Path) -> None:
    ha_port = free_port()
    master = Spool(
        tmp_path / "master",
        "--broker-name",
        "m",
        "--ha-listen",
        f"127.0.0.1:{ha_port}",
        "--replication",
        "sync",
        "--sync-flush-timeout-ms",
        "120000",  # a stalled slave keeps every put waiting
        "--ha-catch-up-window-s",
        "600",  # ... and in the in-sync set
    )
    slave = Spool(
        tmp_path / "slave",
        "--role",
        "slave",
        "--broker-name",
        "s",
        "--master-http",
        master.url,
        "--master-ha",
        f"127.0.0.1:{ha_port}",
    )
    try:
        wait_until(lambda: replica(master.url)["sync_state_set"] == ["s"])
        with master.client() as client:
            failed = client.post("/v1/topics/Back/messages", json={"body": "fails", "queue_id": 0})
            assert failed.json()["messages"][0]["status"] == "PUT_OK"
        failed_id = failed.json()["messages"][0]["msg_id"]

        slave.stall()
        order = {"body": "order 42 paid", "keys": ["order-42"]}
        back = {"msg_id": failed_id, "delay_level": -1}  # straight to %DLQ%billing
        with master.client(timeout=1.5) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                impatient.post(
                    "/v1/topics/Orders/messages",
                    json=order,
                    headers={"Idempotency-Key": "order-42-paid"},
                )
            with pytest.raises(httpx.ReadTimeout):
                impatient.post("/v1/groups/billing/retry", json=back)
        # Both are written (and waiting for the slave) when the master dies.
        with master.client() as client:
            wait_until(
                lambda: (
                    len(
                        client.get("/v1/topics/Orders/messages", params={"key": "order-42"}).json()[
                            "messages"
                        ]
                    )
                    == 1
                )
            )
            written = client.get("/v1/topics/Orders/messages", params={"key": "order-42"})
            wait_until(
                lambda: len(client.get("/v1/groups/billing/dlq/messages").json()["messages"]) == 1
            )
            dead = client.get("/v1/groups/billing/dlq/messages").json()["messages"][0]
        master.kill()

        master.restart()  # alone: its slave is still stopped
        with master.client() as client:
            again = client.post(
                "/v1/topics/Orders/messages",
                json=order,
                headers={"Idempotency-Key": "order-42-paid"},
            )
            assert again.status_code == 201, again.text
            assert again.headers["idempotent-replayed"] == "true"
            receipt = again.json()["messages"][0]
            original = written.json()["messages"][0]
            assert receipt["msg_id"] == original["msg_id"]
            assert receipt["queue_offset"] == original["queue_offset"]
            assert receipt["store_timestamp"] == original["store_timestamp"]
            assert [m["body"] for m in all_messages(client, "Orders")] == ["order 42 paid"]

            resent = client.post("/v1/groups/billing/retry", json=back)
            assert resent.status_code == 200, resent.text
            assert resent.json()["msg_id"] == dead["msg_id"]
            assert len(client.get("/v1/groups/billing/dlq/messages").json()["messages"]) == 1
    finally:
        slave.kill()
        master.kill()


@pytest.mark.slow
def test_a_delivery_repeated_after_a_crash_stores_one_copy(tmp_path: Path) -> None:
    store = tmp_path / "store"
    server = Spool(store, "--message-delay-levels", " ".join(["1s"] * 18))
    try:
        with server.client() as client:
            sent = client.post(
                "/v1/topics/Later/messages", json={"body": "due", "delay_level": 1, "queue_id": 2}
            )
            assert sent.status_code == 201
            wait_until(lambda: len(all_messages(client, "Later")) == 1)
        server.kill()
        # As if the crash came before the scheduler saved its progress (every 10 s): the
        # restarted broker delivers the message again.
        offsets = store / "config" / "delayOffset.json"
        offsets.write_text(json.dumps({"offsetTable": {"1": 0}}))
        (store / "config" / "delayOffset.json.bak").unlink(missing_ok=True)
        server.restart()
        with server.client() as client:
            wait_until(lambda: _level_offset(client) == 1)  # delivered (again)
            delivered = all_messages(client, "Later")
            assert [m["body"] for m in delivered] == ["due"]
    finally:
        server.kill()


def _level_offset(client: httpx.Client) -> int:
    """Where level 1 of the delay scheduler stands."""
    answer = client.get("/v1/delays").json()
    return int(next(level["next_offset"] for level in answer["levels"] if level["level"] == 1))


ORDER = OutgoingMessage(b"order 42 paid", keys=("order-42",))


def crashed_broker(store: Path, **config: Any) -> Broker:
    """A broker on a store a kill -9 left behind (same file size as :class:`Spool`)."""
    return Broker(BrokerConfig(store, StoreConfig(commit_log_file_size=int(FILE_SIZE)), **config))


async def hold_index_catch_up(broker: Broker) -> None:
    """Stop the background rebuild of the key index (as if it were slow)."""
    catch_up = broker._index_catch_up
    assert catch_up is not None
    await catch_up.stop()


async def keyed_send_waits_for_the_index(broker: Broker, original: dict[str, Any]) -> None:
    """A keyed repeat on ``broker``, whose index lags, waits (writing nothing) until the
    index covers the log, then answers the original receipt."""
    store = broker._store
    assert store is not None
    end = store.max_physical_offset
    idempotency = broker.services.idempotency
    assert not idempotency.ready_now  # the index does not cover what the broker holds
    assert broker.topic_configs.get("Orders") is not None  # the send has nothing else to wait for
    sending = asyncio.create_task(
        broker.send.send("Orders", [ORDER], idempotency_key="order-42-paid")
    )
    for _ in range(100):
        await asyncio.sleep(0)
    assert not sending.done()  # waiting: it cannot tell a retry from a new send yet
    assert store.max_physical_offset == end
    catch_up = asyncio.create_task(idempotency.catch_up_index())
    [receipt] = await sending
    await catch_up
    assert receipt.replayed
    assert (receipt.msg_id, receipt.queue_id, receipt.queue_offset) == (
        original["msg_id"],
        original["queue_id"],
        original["queue_offset"],
    )
    assert store.max_physical_offset == end  # nothing stored twice


@pytest.mark.slow
async def test_after_an_unclean_exit_keyed_sends_wait_for_the_index(tmp_path: Path) -> None:
    store = tmp_path / "store"
    server = Spool(store)
    try:
        with server.client() as client:
            for i in range(50):  # the index has more to rebuild than the keyed send
                client.post("/v1/topics/Orders/messages", json={"body": f"b{i}", "keys": [f"k{i}"]})
            sent = client.post(
                "/v1/topics/Orders/messages",
                json={"body": "order 42 paid", "keys": ["order-42"]},
                headers={"Idempotency-Key": "order-42-paid"},
            )
    finally:
        server.kill()
    broker = crashed_broker(store)
    await broker.start()
    try:
        await hold_index_catch_up(broker)
        await keyed_send_waits_for_the_index(broker, sent.json()["messages"][0])
    finally:
        await broker.stop()


@pytest.mark.slow
async def test_a_promoted_slave_answers_the_original_receipt(tmp_path: Path) -> None:
    master = start_server(
        tmp_path / "master",
        commit_log_file_size=int(FILE_SIZE),
        broker_name="a",
        ha_listen="127.0.0.1:0",
    )
    ha_address = master.broker.replica.ha_address
    assert ha_address is not None
    slave = Spool(
        tmp_path / "slave",
        "--role",
        "slave",
        "--broker-name",
        "b",
        "--master-http",
        master.url,
        "--master-ha",
        ha_address,
    )
    try:
        with master.client() as client:
            sent = client.post(
                "/v1/topics/Orders/messages",
                json={"body": "order 42 paid", "keys": ["order-42"]},
                headers={"Idempotency-Key": "order-42-paid"},
            )
            end = replica(master.url)["max_physical_offset"]
        wait_until(lambda: replica(slave.url)["max_physical_offset"] == end)
        # The config sync takes the topic in memory, then writes topics.json: the kill below
        # must come after the write.
        topics = tmp_path / "slave" / "config" / "topics.json"
        wait_until(lambda: topics.exists() and '"Orders"' in topics.read_text())
    finally:
        slave.kill()  # unclean: its index is rebuilt when it comes back
        master.stop()
    # The slave comes back (its master is gone) and is promoted before its index caught up.
    broker = crashed_broker(
        tmp_path / "slave",
        role="slave",
        broker_name="b",
        master=MasterAddress("a", master.url, ha_address),
        ha_listen="127.0.0.1:0",
    )
    await broker.start()
    try:
        await hold_index_catch_up(broker)
        await broker.replica.promote(2)
        assert broker.replica.role == "master"
        await keyed_send_waits_for_the_index(broker, sent.json()["messages"][0])
        # A new key is a new message.
        [fresh] = await broker.send.send("Orders", [ORDER], idempotency_key="order-43-paid")
        assert not fresh.replayed
    finally:
        await broker.stop()
