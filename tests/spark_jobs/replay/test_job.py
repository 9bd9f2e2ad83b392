"""Replay in a real local Spark: to Parquet (exactly the selected messages), dry runs, HTTP."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from spark_jobs import cli
from spark_jobs.replay.job import HttpTarget, Selection, run_replay
from storage import Message
from storage.record.properties import BOOKKEEPING_PROPERTIES, shown_properties
from tests.spark_jobs.stores import Written, expected_row, sorted_rows, varied_message, write_store
from tests.spark_jobs.stub_server import stub_server


@pytest.fixture(scope="module")
def replay_store(tmp_path_factory: pytest.TempPathFactory) -> list[Written]:
    """400 varied messages, a little apart in time."""
    import random

    rng = random.Random(21)

    def tick(index: int) -> None:
        if index % 4 == 0:
            time.sleep(0.002)

    store_dir = tmp_path_factory.mktemp("replay") / "store"
    return write_store(store_dir, (varied_message(rng, i) for i in range(400)), before_put=tick)


def sent_over_http(items: list[Written]) -> list[Written]:
    """What a replay over HTTP sends of its selection: a broker refuses an empty body, so a
    message with one is left out (and counted)."""
    return [item for item in items if item.message.body]


def selected(written: list[Written], selection: Selection) -> list[Written]:
    """The ground truth of a selection."""
    keep = []
    for item in written:
        message, result = item.message, item.result
        properties = message.properties
        keys = set(properties.get("KEYS", "").split())
        if selection.topics and message.topic not in selection.topics:
            continue
        if selection.queues and message.queue_id not in selection.queues:
            continue
        if selection.from_ms is not None and result.store_timestamp < selection.from_ms:
            continue
        if selection.to_ms is not None and result.store_timestamp >= selection.to_ms:
            continue
        if selection.from_offset is not None and result.queue_offset < selection.from_offset:
            continue
        if selection.to_offset is not None and result.queue_offset >= selection.to_offset:
            continue
        if selection.tags is not None and properties.get("TAGS") not in selection.tags:
            continue
        if selection.keys and not keys & set(selection.keys):
            continue
        keep.append(item)
    return keep


def test_replay_to_parquet_returns_exactly_the_selected_messages(
    spark: SparkSession, replay_store: list[Written], tmp_path: Path
) -> None:
    stores = (replay_store[0].store_dir,)
    times = sorted(w.result.store_timestamp for w in replay_store)
    selections = [
        Selection(stores, topics=("Orders",), queues=(0, 3), from_offset=5, to_offset=30),
        Selection(
            stores, tags=frozenset({"Paid", "Shipped"}), from_ms=times[100], to_ms=times[300]
        ),
        Selection(stores, keys=("customer-3", "order-9")),
        Selection(stores, topics=("Payments", "Audit"), queues=(1,), tags=frozenset({"Created"})),
    ]
    for index, selection in enumerate(selections):
        expected = [expected_row(w) for w in selected(replay_store, selection)]
        assert expected, "every selection should pick something"
        out = tmp_path / f"out{index}"
        summary = run_replay(spark, selection, f"parquet:{out}")
        assert summary.written == summary.selected == len(expected)
        assert sorted_rows(pq.read_table(out).to_pylist()) == expected


def test_dry_run_counts_without_writing(
    spark: SparkSession,
    replay_store: list[Written],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = replay_store[0].store_dir
    code = cli.main(["replay", "--store", store, "--topic", "Orders,Audit", "--dry-run"])
    assert code == 0
    output = capsys.readouterr().out
    orders = sum(1 for w in replay_store if w.message.topic == "Orders")
    audit = sum(1 for w in replay_store if w.message.topic == "Audit")
    assert f"selected {orders + audit:,} messages" in output
    assert f"  Orders: {orders:,}" in output and f"  Audit: {audit:,}" in output
    assert "dry run: nothing written or sent" in output


def test_command_line_replay_to_parquet(
    spark: SparkSession,
    replay_store: list[Written],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = replay_store[0].store_dir
    out = tmp_path / "parquet"
    args = [
        "replay",
        "--store",
        store,
        "--topic",
        "Payments",
        "--tags",
        "Paid",
        "--to",
        f"parquet:{out}",
    ]
    assert cli.main(args) == 0
    expected = [
        expected_row(w)
        for w in replay_store
        if w.message.topic == "Payments" and w.message.properties.get("TAGS") == "Paid"
    ]
    assert sorted_rows(pq.read_table(out).to_pylist()) == expected
    assert f"wrote {len(expected):,} messages to {out}" in capsys.readouterr().out
    with pytest.raises(AnalysisException, match="already exists"):
        cli.main(args)
    assert cli.main([*args, "--overwrite"]) == 0


@pytest.mark.parametrize(
    ("expression", "expect_all"), [("||", False), (" || ", False), (" ", False), ("*", True)]
)
def test_a_tag_expression_without_tags_selects_nothing(
    spark: SparkSession,
    replay_store: list[Written],
    capsys: pytest.CaptureFixture[str],
    expression: str,
    expect_all: bool,
) -> None:
    store = replay_store[0].store_dir
    args = ["replay", "--store", store, "--topic", "Orders", "--tags", expression, "--dry-run"]
    assert cli.main(args) == 0
    orders = sum(1 for w in replay_store if w.message.topic == "Orders")
    assert f"selected {orders if expect_all else 0:,} messages" in capsys.readouterr().out


def test_command_line_refuses_incomplete_targets(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["replay", "--store", "/nowhere", "--to", "http://127.0.0.1:1"])
    assert "--target-topic is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["replay", "--store", "/nowhere", "--to", "s3://bucket"])
    assert "--to must be parquet:PATH or http://host:port" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["replay", "--store", "/nowhere", "--to", "http://a:1,b:2", "--target-topic", "T"])
    assert "an endpoint is an http:// or https:// URL, not 'b:2'" in capsys.readouterr().err


def test_command_line_replay_goes_on_to_the_next_endpoint_after_a_slaves_421(
    spark: SparkSession, replay_store: list[Written], capsys: pytest.CaptureFixture[str]
) -> None:
    store = replay_store[0].store_dir
    chosen = selected(replay_store, Selection((store,), topics=("Audit",), queues=(2,)))
    expected = sent_over_http(chosen)
    assert len(expected) < len(chosen)  # the store holds empty bodies too
    with stub_server() as (slave_url, slave), stub_server() as (master_url, master):
        slave.refuse_with = 421  # a slave never takes a write
        to = f"{slave_url}/,{master_url}"
        args = ["replay", "--store", store, "--topic", "Audit", "--queue", "2", "--to", to]
        assert cli.main([*args, "--target-topic", "AuditReplay", "--rate", "0"]) == 0
    assert len(slave.attempts) == 1  # then the master, which answered every batch after it
    assert [m["properties"]["REPLAY_OF"] for m in master.messages] == [
        w.result.msg_id for w in expected
    ]
    printed = capsys.readouterr().out
    assert f"sent {len(expected):,} messages to {slave_url}, {master_url} topic AuditReplay" in (
        printed
    )
    assert ", 1 retries" in printed


def test_replay_over_http_sends_the_selection_in_order(
    spark: SparkSession, replay_store: list[Written]
) -> None:
    selection = Selection((replay_store[0].store_dir,), topics=("Audit",), queues=(2,))
    chosen = selected(replay_store, selection)
    expected = sent_over_http(chosen)
    with stub_server() as (url, state):
        target = HttpTarget((url,), "AuditReplay", batch_size=7, rate=2_000)
        summary = run_replay(spark, selection, url, target)
    assert summary.send is not None and summary.send.sent == len(expected)
    assert summary.send.empty_bodies == len(chosen) - len(expected) > 0
    assert "messages left out: their bodies are empty" in "\n".join(summary.lines())
    assert {path for path, _ in state.requests} == {"/v1/topics/AuditReplay/messages"}
    assert max(len(body["messages"]) for _, body in state.requests) == 7
    sent = state.messages
    assert [m["properties"]["REPLAY_OF"] for m in sent] == [w.result.msg_id for w in expected]
    assert [base64.b64decode(m["body"]) for m in sent] == [w.message.body for w in expected]
    assert [m.get("tags") for m in sent] == [w.message.properties.get("TAGS") for w in expected]
    for message, item in zip(sent, expected, strict=True):
        assert message.get("keys", []) == item.message.properties.get("KEYS", "").split()
        assert "UNIQ_KEY" not in message["properties"]


def test_a_key_selects_what_producers_sent_not_the_brokers_copies(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A message and its retry, dead-letter, delay, timer, POP-checkpoint and transaction
    (half, op, check-max) copies and its trace records all carry the key: by default only the
    original (and any user topic) is replayed."""
    topics = ["Orders", "OrdersReplay", "%RETRY%billing", "%DLQ%billing", "SCHEDULE_TOPIC_XXXX"]
    topics += ["rmq_sys_REVIVE_LOG", "rmq_sys_wheel_timer", "RMQ_SYS_TRANS_HALF_TOPIC"]
    topics += ["RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "RMQ_SYS_TRACE_TOPIC"]
    messages = [Message(t, b"order 42 paid", properties={"KEYS": "order-42"}) for t in topics]
    store = write_store(tmp_path / "store", messages)[0].store_dir

    def dry_run(*extra: str) -> str:
        assert cli.main(["replay", "--store", store, "--key", "order-42", "--dry-run", *extra]) == 0
        return capsys.readouterr().out

    default = dry_run()
    assert "selected 2 messages" in default
    assert "  Orders: 1" in default and "  OrdersReplay: 1" in default
    assert "%" not in default and "SCHEDULE" not in default and "rmq_sys" not in default
    assert "TRANS" not in default and "TRACE" not in default
    assert "selected 11 messages" in dry_run("--include-system")
    named = dry_run("--topic", "%DLQ%billing")
    assert "selected 1 messages" in named and "  %DLQ%billing: 1" in named


def test_replayed_rows_show_none_of_the_brokers_bookkeeping(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Records as the broker stores them -- a committed transactional message, a delayed one,
    a POP-revived retry, a keyed send -- keep their re-put keys, POP_CK and fingerprints in
    the files; a replay shows none of them, as no read of the broker does."""
    uniq = "7F00000100002A9F0000000000000001"
    stamped = [
        {"__transactionId__": uniq, "PGROUP": "pg", "IDEMPOTENCY_KEY": "re-put 0"},
        {"REAL_TOPIC": "Orders", "REAL_QID": "0", "IDEMPOTENCY_KEY": "re-put 200"},
        {"RETRY_TOPIC": "Orders", "POP_CK": "Orders 0 1 ck", "IDEMPOTENCY_KEY": "re-put 400"},
        {"IDEMPOTENCY_KEY": "order-42", "IDEMPOTENCY_FP": "f", "IDEMPOTENCY_BATCH": "2"},
        {"TRAN_DELAY": "3", "TRAN_TIMER_DELAY_MS": "10", "TRAN_END": "COMMIT", "region": "eu"},
    ]
    topics = ["Orders", "Orders", "%RETRY%billing", "Orders", "TRANS_CHECK_MAX_TIME_TOPIC"]
    messages = [
        Message(topic, f"m{i}".encode(), properties={"UNIQ_KEY": uniq, "KEYS": "k", **extra})
        for i, (topic, extra) in enumerate(zip(topics, stamped, strict=True))
    ]
    written = write_store(tmp_path / "store", messages)
    out = tmp_path / "out"
    selection = Selection((written[0].store_dir,), include_system=True)
    assert run_replay(spark, selection, f"parquet:{out}").written == len(messages)
    rows = sorted_rows(pq.read_table(out).to_pylist())
    expected = [
        {**expected_row(w), "properties": shown_properties(expected_row(w)["properties"])}
        for w in written
    ]
    assert rows == expected
    assert all(not BOOKKEEPING_PROPERTIES & row["properties"].keys() for row in rows)
    assert rows[0]["properties"]["__transactionId__"] == uniq  # RocketMQ's own stay
    assert rows[4]["properties"] == {"UNIQ_KEY": uniq, "KEYS": "k", "region": "eu"}
