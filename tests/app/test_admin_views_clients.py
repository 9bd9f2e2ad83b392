"""The Clients admin page in a real browser (Debian's Chromium through Playwright): the clients
of the broker's RocketMQ 5 gRPC face (official Python clients, connected for the test) with
their id, type, group, language, version, when they were last heard of and their address — and,
on a broker without ``--grpc-listen``, a page saying the face is off."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from playwright.sync_api import expect
from rocketmq import (  # type: ignore[import-untyped]
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Producer,
    SimpleConsumer,
)

from app.grpc.server import GrpcServer
from tests.app.browser_support import Admin, layout_faults, needs_chromium
from tests.conftest import LiveServer, start_server, wait_until

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The module's server, with the gRPC face on (the ``admin`` fixture opens its pages)."""
    live = start_server(tmp_path_factory.mktemp("store"), grpc_listen="127.0.0.1:0")
    yield live
    live.stop()


def grpc_face(live: LiveServer) -> GrpcServer:
    """The server's gRPC face (its port, its client table)."""
    app: FastAPI = live.server.app  # type: ignore[assignment]
    face: GrpcServer = app.state.grpc
    return face


def grpc_address(live: LiveServer) -> str:
    return f"127.0.0.1:{grpc_face(live).port}"


def test_the_clients_page_lists_the_grpc_faces_clients(admin: Admin) -> None:
    page, api = admin.page, admin.api
    topic, group = "ClientsShown", "ClientsShownWorkers"
    body = {"read_queue_nums": 2, "write_queue_nums": 2}
    assert api.put(f"/v1/topics/{topic}", json=body).status_code == 201
    config = ClientConfiguration(grpc_address(admin.live), Credentials(), request_timeout=15)
    producer = Producer(config, (topic,))
    producer.startup()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression("*")}, await_duration=1)
    consumer.startup()
    try:
        table = grpc_face(admin.live).face.clients
        wait_until(lambda: len(table.clients()) >= 2, timeout=60)
        admin.goto("/admin/clients")
        rows = page.locator("main table.data tbody tr")
        expect(rows).to_have_count(2)
        shown = {
            row.locator("td").nth(1).inner_text(): [
                cell.inner_text() for cell in row.locator("td").all()
            ]
            for row in rows.all()
        }
        assert set(shown) == {"producer", "simple consumer"}
        consumer_row = shown["simple consumer"]
        assert consumer_row[2] == group
        assert consumer_row[3] == "PYTHON"
        assert consumer_row[4]  # the client's version
        assert re.fullmatch(r"\d+ s ago", consumer_row[5])
        assert re.fullmatch(r"127\.0\.0\.1:\d+|—", consumer_row[6])
        assert shown["producer"][2] == "—"  # a producer has no group
        ids = {client.client_id for client in table.clients()}
        assert {cells[0] for cells in shown.values()} == ids
        expect(page.locator('nav a[aria-current="page"]')).to_have_text("Clients")
        assert layout_faults(page) == []
        admin.shot("clients")
    finally:
        consumer.shutdown()
        producer.shutdown()
    # a client that says goodbye leaves the table
    wait_until(lambda: len(table.clients()) == 0, 60)
    admin.goto("/admin/clients")
    expect(page.locator("main table.data tbody tr td.empty")).to_have_count(1)


def test_a_broker_without_the_grpc_face_says_it_is_off(admin: Admin, tmp_path: Path) -> None:
    plain = start_server(tmp_path / "plain")
    try:
        response = admin.page.goto(plain.url + "/admin/clients")
        assert response is not None and response.ok
        expect(admin.page.locator("main")).to_contain_text("No gRPC clients (the gRPC face is off)")
        expect(admin.page.locator("main table")).to_have_count(0)
    finally:
        plain.stop()
