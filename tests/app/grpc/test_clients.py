"""The client table: who spoke, as what, and who said goodbye."""

from __future__ import annotations

from app.grpc.clients import ClientTable


def test_a_client_is_listed_with_what_it_said_last_and_keeps_what_it_left_out() -> None:
    table = ClientTable()
    table.seen("c1", client_type="SIMPLE_CONSUMER", group="g", language="PYTHON", version="5.1.2")
    table.seen("c1", client_type="SIMPLE_CONSUMER")  # a heartbeat names no language
    [info] = table.clients()
    assert (info.client_id, info.group, info.language, info.version) == (
        "c1",
        "g",
        "PYTHON",
        "5.1.2",
    )


def test_a_terminated_or_silent_client_is_dropped() -> None:
    table = ClientTable()
    table.seen("c1")
    table.seen("c2")
    table.terminated("c1")
    assert [c.client_id for c in table.clients()] == ["c2"]
    silent = ClientTable(expiry_s=-1.0)  # everyone is already silent too long
    silent.seen("c3")
    assert silent.clients() == []
