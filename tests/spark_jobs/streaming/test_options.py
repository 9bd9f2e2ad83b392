"""Parsing the source's and the sink's options: defaults, the Kafka conventions, clear
refusals."""

from __future__ import annotations

import pytest

from spark_jobs.http_client import RetryPolicy
from spark_jobs.options import OptionError
from spark_jobs.streaming.options import (
    EARLIEST,
    LATEST,
    PositionKind,
    RowOrder,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)

URL = "http://127.0.0.1:8080"


def source(streaming: bool = True, **options: str) -> SourceOptions:
    return parse_source_options({"spoolmq.endpoints": URL, **options}, streaming)


def test_defaults_follow_kafka_a_stream_starts_at_latest_a_batch_at_earliest() -> None:
    stream = source(subscribe="Orders, Paid")
    assert stream.subscription.topics == ("Orders", "Paid")
    assert stream.starting.kind is PositionKind.LATEST
    assert (stream.fail_on_data_loss, stream.max_offsets_per_trigger) == (True, None)
    batch = source(streaming=False, subscribe="Orders")
    assert (batch.starting.kind, batch.ending.kind) == (PositionKind.EARLIEST, PositionKind.LATEST)
    assert stream.connection.endpoints == (URL,)
    assert stream.connection.retry == RetryPolicy()


def test_names_are_case_insensitive_as_spark_hands_them_over() -> None:
    options = parse_source_options(
        {"SPOOLMQ.ENDPOINTS": URL + "/", "SUBSCRIBEPATTERN": "Ord.*", "maxoffsetspertrigger": "7"},
        streaming=True,
    )
    assert options.connection.endpoints == (URL,)
    assert options.subscription.matches("Orders") and not options.subscription.matches("XOrders")
    assert options.max_offsets_per_trigger == 7


def test_offsets_json_earliest_latest_and_timestamps() -> None:
    given = source(startingOffsets='{"Orders": {"1": -2, "0": 23, "2": -1}}', subscribe="Orders")
    assert given.starting.kind is PositionKind.OFFSETS
    assert given.starting.offsets == (
        ("Orders", 0, 23),
        ("Orders", 1, EARLIEST),
        ("Orders", 2, LATEST),
    )
    stamped = source(startingTimestamp="2024-05-01T00:00:00Z", subscribe="Orders")
    assert (stamped.starting.kind, stamped.starting.timestamp_ms) == (
        PositionKind.TIMESTAMP,
        1714521600000,
    )
    assigned = source(assign='{"Paid": [3, 1, 3], "Orders": [0]}')
    assert assigned.subscription.assigned == (("Orders", (0,)), ("Paid", (1, 3)))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({}, "exactly one of subscribe", id="no-subscription"),
        pytest.param({"subscribe": "A", "assign": '{"A": [0]}'}, "got subscribe, assign", id="two"),
        pytest.param({"subscribe": "bad topic"}, "not a topic name", id="topic-name"),
        pytest.param({"subscribePattern": "("}, "not a regular expression", id="pattern"),
        pytest.param({"assign": "[0]"}, "JSON object", id="assign-shape"),
        pytest.param({"assign": '{"A": []}'}, "non-empty list", id="assign-empty"),
        pytest.param(
            {"subscribe": "A", "startingOffsets": '{"A": {"0": -3}}'}, "-2 earliest", id="offset"
        ),
        pytest.param({"subscribe": "A", "startingOffsets": "{"}, "not JSON", id="json"),
        pytest.param(
            {"subscribe": "A", "startingOffsets": "earliest", "startingTimestamp": "1"},
            "not both",
            id="both",
        ),
        pytest.param({"subscribe": "A", "endingOffsets": "latest"}, "batch reads", id="ending"),
        pytest.param({"subscribe": "A", "maxOffsetsPerTrigger": "0"}, "positive", id="limit"),
        pytest.param({"subscribe": "A", "failOnDataLoss": "maybe"}, "true or false", id="bool"),
        pytest.param({"subscribe": "A", "spoolmq.retries": "-1"}, "0 or more", id="retries"),
        pytest.param({"subscribe": "A", "headWaitMs": "10001"}, "0 to 10000", id="head-wait"),
        pytest.param({"subscribe": "A", "headWaitMs": "soon"}, "an integer", id="head-wait-int"),
    ],
)
def test_bad_source_options_are_refused_with_the_reason(
    options: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        source(True, **options)


def test_endpoints_are_required_urls_and_the_token_falls_back_to_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(OptionError, match="no spoolmq endpoint"):
        parse_source_options({"subscribe": "A"}, True)
    with pytest.raises(OptionError, match="http:// or https://"):
        parse_source_options({"subscribe": "A", "spoolmq.endpoints": "127.0.0.1:8080"}, True)
    monkeypatch.setenv("SPOOLMQ_TOKEN", "from-env")
    assert source(subscribe="A").connection.token == "from-env"
    assert (
        parse_source_options(
            {"spoolmq.endpoints": URL, "subscribe": "A", "spoolmq.token": "given"}, True
        ).connection.token
        == "given"
    )
    assert "from-env" not in repr(source(subscribe="A").connection)


def test_sink_options() -> None:
    sink = parse_sink_options({"spoolmq.endpoints": f"{URL},{URL}2", "topic": "Paid"})
    assert (sink.topic, sink.batch_size, sink.row_order, sink.write_id) == (
        "Paid",
        100,
        RowOrder.SORTED,
        None,
    )
    assert sink.connection.endpoints == (URL, URL + "2")
    assert parse_sink_options({"endpoint": URL, "rowOrder": "INPUT"}).row_order is RowOrder.INPUT
    for bad, message in (
        ({"rowOrder": "random"}, "sorted or input"),
        ({"batchSize": "1001"}, "at most 1000"),
        ({"writeId": "has space"}, "writeId"),
        ({"topic": "no/slash"}, "not a topic name"),
    ):
        with pytest.raises(OptionError, match=message):
            parse_sink_options({"endpoint": URL, **bad})
