"""The committed OpenAPI document: up to date, usable by a generated SDK, honoured by the server."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.schemathesis_support import generated_sdk, run_schemathesis
from tests.conftest import LiveServer, start_server

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "openapi" / "openapi.json"
BIN = Path(sys.executable).parent


def test_committed_document_matches_the_app() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "export_openapi.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_fails_on_a_stale_document(tmp_path: Path) -> None:
    stale = tmp_path / "openapi.json"
    stale.write_text(SCHEMA.read_text().replace("sendMessages", "sendMessage"))
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "export_openapi.py"),
            "--check",
            "--output",
            str(stale),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 1
    assert "sendMessage" in result.stdout


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Python client generated from openapi/openapi.json, importable as spoolmq_sdk."""
    with generated_sdk(SCHEMA, "spoolmq_sdk", tmp_path_factory.mktemp("sdk")) as module:
        yield module


def test_generated_client_sends_pulls_and_commits(sdk: Any, live_server: LiveServer) -> None:
    api = importlib.import_module("spoolmq_sdk.api.messages.send_messages")
    pull_api = importlib.import_module("spoolmq_sdk.api.messages.pull_messages")
    commit_api = importlib.import_module("spoolmq_sdk.api.groups.commit_offset")
    offsets_api = importlib.import_module("spoolmq_sdk.api.groups.get_group_offsets")
    models = importlib.import_module("spoolmq_sdk.models")

    with sdk.Client(base_url=live_server.url, raise_on_unexpected_status=True) as client:
        sent = api.sync(
            "SdkTopic",
            client=client,
            body=models.SendMessage(body="from the sdk", tags="Sdk", keys=["k"], queue_id=0),
        )
        assert isinstance(sent, models.SendResponse)
        receipt = sent.messages[0]
        assert receipt.queue_id == 0

        pulled = pull_api.sync(
            "SdkTopic", 0, client=client, offset=receipt.queue_offset, wait_ms=1000
        )
        assert isinstance(pulled, models.PullResponse)
        assert pulled.status == "FOUND"
        assert [m.body for m in pulled.messages] == ["from the sdk"]
        assert pulled.messages[0].tags == "Sdk"

        committed = commit_api.sync(
            "sdk-group",
            "SdkTopic",
            0,
            client=client,
            body=models.OffsetCommitIn(offset=pulled.next_offset),
        )
        assert committed.offsets[0].offset == pulled.next_offset

        report = offsets_api.sync("sdk-group", client=client)
        assert report.topics[0].queues[0].committed_offset == pulled.next_offset
        assert report.total_lag == 0

        missing = pull_api.sync("NoSuchSdkTopic", 0, client=client)
        assert isinstance(missing, models.Problem)
        assert missing.code == "TOPIC_NOT_FOUND"


def test_generated_client_retries_a_send_with_its_idempotency_key(
    sdk: Any, live_server: LiveServer
) -> None:
    api = importlib.import_module("spoolmq_sdk.api.messages.send_messages")
    models = importlib.import_module("spoolmq_sdk.models")

    with sdk.Client(base_url=live_server.url) as client:
        paid = models.SendMessage(body="order 42 paid", keys=["order-42"])
        first = api.sync_detailed("SdkKeyed", client=client, body=paid, idempotency_key="o-42")
        again = api.sync_detailed("SdkKeyed", client=client, body=paid, idempotency_key="o-42")
        assert (first.status_code, again.status_code) == (201, 201)
        assert "idempotent-replayed" not in first.headers
        assert again.headers["idempotent-replayed"] == "true"
        assert again.parsed.messages[0].msg_id == first.parsed.messages[0].msg_id

        other = models.SendMessage(body="order 43 paid")
        refused = api.sync("SdkKeyed", client=client, body=other, idempotency_key="o-42")
        assert isinstance(refused, models.Problem)
        assert refused.code == "IDEMPOTENCY_KEY_REUSED"


def test_generated_models_see_always_sent_fields_as_required(sdk: Any) -> None:
    # Issue 15: the SDK types an optional field as ``Unset | ...``.
    models = importlib.import_module("spoolmq_sdk.models")
    for model, fields in [
        ("SendReceiptOut", ["status", "delay_level", "deliver_at"]),
        ("RedriveOutcomeOut", ["new_msg_id", "error"]),
        ("RedriveJobOut", ["state", "finished_at", "outcomes"]),
    ]:
        parameters = inspect.signature(getattr(models, model)).parameters
        for field in fields:
            assert "Unset" not in str(parameters[field].annotation), (model, field)
    optional = inspect.signature(models.MessageOut).parameters["queue_topic"]
    assert "Unset" in str(optional.annotation), "sent by retry-topic pulls only"


def test_generated_client_receives_and_acks(sdk: Any, live_server: LiveServer) -> None:
    send_api = importlib.import_module("spoolmq_sdk.api.messages.send_messages")
    receive_api = importlib.import_module("spoolmq_sdk.api.groups.receive_messages")
    ack_api = importlib.import_module("spoolmq_sdk.api.groups.ack_messages")
    models = importlib.import_module("spoolmq_sdk.models")

    with sdk.Client(base_url=live_server.url, raise_on_unexpected_status=True) as client:
        send_api.sync("SdkPop", client=client, body=models.SendMessage(body="work item"))
        received = receive_api.sync(
            "sdk-workers",
            "SdkPop",
            client=client,
            body=models.ReceiveIn(max_messages=4, wait_ms=1000, invisible_ms=60_000),
        )
        assert isinstance(received, models.ReceiveResponse)
        [message] = received.messages
        assert (message.body, message.delivery_attempt) == ("work item", 1)
        acked = ack_api.sync(
            "sdk-workers",
            client=client,
            body=models.AckIn(receipt_handles=[message.receipt_handle]),
        )
        assert isinstance(acked, models.AckResponse)
        assert [r.outcome for r in acked.results] == ["acked"]
        again = receive_api.sync("sdk-workers", "SdkPop", client=client, body=models.ReceiveIn())
        assert isinstance(again, models.ReceiveResponse)
        assert again.messages == []


@pytest.fixture
def fuzzed(tmp_path: Path) -> Iterator[LiveServer]:
    """Long-polls cut to 50 ms so that generated wait_ms values do not stretch the run."""
    live = start_server(tmp_path / "fuzzed", long_poll_max_ms=50)
    yield live
    live.stop()


def test_schemathesis_finds_no_server_errors_no_schema_violations_and_no_refused_valid_data(
    fuzzed: LiveServer,
) -> None:
    result = run_schemathesis(
        SCHEMA,
        fuzzed.url,
        fuzzed.store_dir.parent,
        seed=1,
        max_examples=25,
        request_timeout_s=30,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


def test_generated_client_sends_a_half_message_and_commits_it(
    sdk: Any, live_server: LiveServer
) -> None:
    send_api = importlib.import_module("spoolmq_sdk.api.transactions.send_half_message")
    commit_api = importlib.import_module("spoolmq_sdk.api.transactions.commit_transaction")
    rollback_api = importlib.import_module("spoolmq_sdk.api.transactions.rollback_transaction")
    pull_api = importlib.import_module("spoolmq_sdk.api.messages.pull_messages")
    models = importlib.import_module("spoolmq_sdk.models")

    with sdk.Client(base_url=live_server.url, raise_on_unexpected_status=True) as client:
        half = send_api.sync(
            "SdkTx",
            client=client,
            body=models.TransactionSendIn(
                producer_group="sdk-pg", message=models.SendMessage(body="paid", queue_id=0)
            ),
        )
        assert isinstance(half, models.TransactionOut)
        assert half.state == "open"
        end = models.EndIn(producer_group="sdk-pg")
        committed = commit_api.sync(half.transaction_id, client=client, body=end)
        assert isinstance(committed, models.EndOut)
        assert committed.state == "committed" and committed.repeated is False
        pulled = pull_api.sync("SdkTx", 0, client=client, offset=0)
        assert [m.body for m in pulled.messages] == ["paid"]
        refused = rollback_api.sync(half.transaction_id, client=client, body=end)
        assert isinstance(refused, models.Problem)
        assert refused.code == "TRANSACTION_ALREADY_ENDED"
