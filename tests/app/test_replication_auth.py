"""A master with an auth file: its slave presents a replication token to the replication routes,
and proves it on the HA port."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from services.ha import MasterAddress
from services.ha.client import HAClient
from storage import MessageStore
from storage.epoch_file import EpochFile
from tests.app.auth_support import write_auth_file
from tests.conftest import LiveServer, start_server, wait_until
from tests.services.conftest import wait_for


def replica(server: LiveServer) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{server.url}/v1/replication", timeout=10).json()
    return answer


def slave_of(master: LiveServer, store: Path, **extra: Any) -> LiveServer:
    return start_server(
        store,
        broker_name="b",
        role="slave",
        master_http=master.url,
        master_ha=master.broker.replica.ha_address or "127.0.0.1:1",
        config_sync_interval_s=0.2,
        ha_heartbeat_s=0.2,
        **extra,
    )


def test_a_slave_with_the_replication_token_copies_configs_and_streams(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.toml"
    tokens = write_auth_file(auth_file, {"ops": {"admin": True}, "app": {"produce": ["*"]}})
    master = start_server(
        tmp_path / "a", broker_name="a", ha_listen="127.0.0.1:0", auth_file=auth_file
    )
    admin = {"Authorization": f"Bearer {tokens['ops']}"}
    slave = slave_of(master, tmp_path / "b", replication_token=tokens["ops"])
    try:
        with httpx.Client(base_url=master.url, headers=admin, timeout=10) as http:
            assert http.get("/v1/replication/configs").status_code == 200
            created = http.put("/v1/topics/Locked", json={"write_queue_nums": 2})
            assert created.status_code in (200, 201), created.text
            sent = http.post("/v1/topics/Locked/messages", json={"body": "kept", "queue_id": 1})
            assert sent.status_code == 201, sent.text
        assert httpx.get(f"{master.url}/v1/replication/configs", timeout=10).status_code == 401
        # the slave reads its own routes without a token only when it has no auth file itself
        topics = slave.store_dir / "config" / "topics.json"  # written at the first sync
        wait_until(lambda: topics.exists() and "Locked" in topics.read_text())
        wait_until(
            lambda: (
                httpx.get(f"{slave.url}/v1/topics/Locked/queues/1/messages", timeout=10)
                .json()
                .get("messages", [{}])[0]
                .get("body")
                == "kept"
            )
        )
        assert replica(slave)["error"] is None
    finally:
        slave.stop()
        master.stop()


def test_without_the_token_the_slave_says_why_it_does_not_stream(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.toml"
    tokens = write_auth_file(auth_file, {"ops": {"admin": True}})
    master = start_server(
        tmp_path / "a", broker_name="a", ha_listen="127.0.0.1:0", auth_file=auth_file
    )
    slave = slave_of(master, tmp_path / "b")
    try:
        wait_until(lambda: "401" in (replica(slave)["error"] or ""))
        assert replica(slave)["connected"] is False
        assert tokens  # the master has a token, the slave was not given it
    finally:
        slave.stop()
        master.stop()


async def ha_refusal(master: LiveServer, store_dir: Path, headers: dict[str, str]) -> str:
    """A slave's HA client whose HTTP calls carry a good token and whose HA proof is of a
    wrong one: the error it reports, once refused; nothing was appended."""
    address = MasterAddress("a", master.url, master.broker.replica.ha_address or "")
    store = MessageStore.open(store_dir)
    client = HAClient(store, EpochFile(store_dir).load(), address, "b", 0.2, headers, "smq_wrong")
    client.start()
    try:
        await wait_for(lambda: "refused" in (client.error or ""), within=30)
        assert store.max_physical_offset == 0
        return client.error or ""
    finally:
        await client.stop()
        store.close()


def test_a_slave_proving_a_wrong_token_on_the_ha_port_says_why(tmp_path: Path) -> None:
    auth_file = tmp_path / "auth.toml"
    tokens = write_auth_file(auth_file, {"ops": {"admin": True}})
    master = start_server(
        tmp_path / "a", broker_name="a", ha_listen="127.0.0.1:0", auth_file=auth_file
    )
    try:
        admin = {"Authorization": f"Bearer {tokens['ops']}"}
        sent = master.client(headers=admin).post("/v1/topics/Locked/messages", json={"body": "x"})
        assert sent.status_code == 201, sent.text
        error = asyncio.run(ha_refusal(master, tmp_path / "b", admin))
        assert error == (
            "master a refused this slave: the proof matches no admin token of this master's "
            "auth file"
        )
    finally:
        master.stop()
