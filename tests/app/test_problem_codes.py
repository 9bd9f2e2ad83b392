"""Each operation declares the problem codes it answers: the OpenAPI document lists them per
status (meanings and the ``code`` enum), and the error mapping logs an answer outside them."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.errors import install_error_handlers
from app.main import create_app
from app.problem_codes import (
    BODY,
    MEANINGS,
    OPERATION_CODES,
    PROBLEM_CODES_KEY,
    STATUS_BY_CODE,
    declares,
)
from services.errors import TimerNotFoundError, TopicNotFoundError
from tests.app.server.support import serving
from tests.conftest import LiveServer

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return create_app().openapi()


def operations(document: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each operation of the document by operationId: its method and the operation."""
    return {
        operation["operationId"]: (method, operation)
        for item in document["paths"].values()
        for method, operation in item.items()
    }


def test_the_table_names_every_operation_of_the_app_and_nothing_else(
    document: dict[str, Any],
) -> None:
    assert set(operations(document)) == set(OPERATION_CODES)


def test_every_declared_code_has_a_status_and_a_meaning() -> None:
    for operation_id, codes in OPERATION_CODES.items():
        for code in codes:
            assert code in STATUS_BY_CODE, (operation_id, code)
            assert code in MEANINGS, (operation_id, code)


def test_each_problem_answer_lists_its_codes_with_their_status_as_the_code_enum(
    document: dict[str, Any],
) -> None:
    for operation_id, (_, operation) in operations(document).items():
        for status, answer in operation["responses"].items():
            if PROBLEM not in answer.get("content", {}):
                continue
            codes = answer[PROBLEM_CODES_KEY]
            schema = answer["content"][PROBLEM]["schema"]
            assert schema["$ref"] == "#/components/schemas/Problem"
            assert schema["properties"]["code"]["enum"] == codes, operation_id
            assert {STATUS_BY_CODE[c] for c in codes} == {int(status)}, operation_id
            for code in codes:
                assert f"`{code}`" in answer["description"], (operation_id, code)


def test_an_operation_answers_with_its_own_codes_and_those_of_its_kind(
    document: dict[str, Any],
) -> None:
    by_id = operations(document)

    def codes_of(operation_id: str) -> set[str]:
        answers = by_id[operation_id][1]["responses"].values()
        return {code for answer in answers for code in answer.get(PROBLEM_CODES_KEY, ())}

    send = codes_of("sendMessages")
    assert {"TOPIC_NOT_FOUND", "MESSAGE_TOO_LARGE", "IDEMPOTENCY_KEY_REUSED"} <= send
    assert set(BODY) <= send  # it takes a body
    assert {"NOT_MASTER", "NO_MASTER"} <= send  # a write
    assert {"UNAUTHORIZED", "FORBIDDEN", "RATE_LIMITED"} <= send
    pull = codes_of("pullMessages")
    assert "NOT_MASTER" not in pull and "MALFORMED_JSON" not in pull  # a read without a body
    assert "TOO_MANY_WAITERS" in pull
    assert "TRANSACTION_ALREADY_ENDED" in codes_of("commitTransaction")
    # any token may ask, but only one that may produce to the transaction's topic is let on
    assert {"FORBIDDEN", "PRODUCER_GROUP_MISMATCH"} <= codes_of("commitTransaction")
    assert "FORBIDDEN" not in codes_of("getDelayLevels")
    assert "FORBIDDEN" not in codes_of("healthz") and "UNAUTHORIZED" not in codes_of("healthz")
    writes = {"putTopic", "deleteGroup", "ackMessages", "pullGroupMessages"}  # that may commit
    for operation_id in (*writes, "getTopic", "pullMessages", "listInFlight"):
        answers_421 = "421" in by_id[operation_id][1]["responses"]
        assert answers_421 is (operation_id in writes), operation_id


def test_the_answers_of_validation_replace_fastapis(document: dict[str, Any]) -> None:
    assert "HTTPValidationError" not in document["components"]["schemas"]
    validation = operations(document)["getTopic"][1]["responses"]["422"]
    assert validation[PROBLEM_CODES_KEY] == ["VALIDATION_FAILED"]


@pytest.mark.parametrize(
    ("operation_id", "status", "code", "declared"),
    [
        ("getTopic", 404, "TOPIC_NOT_FOUND", True),
        ("getTopic", 404, "TIMER_NOT_FOUND", False),  # another operation's code
        ("getTopic", 409, "TOPIC_NOT_FOUND", False),  # its code, another status
        ("getTopic", 503, "BROKER_UNAVAILABLE", True),  # a code of every operation
        ("getTopic", 504, "OUTCOME_UNKNOWN", True),  # a proxy's, in front of any
        ("proxyOnly", 409, "ROUTE_CONFLICT", True),  # not in the table: not checked
        (None, 404, "ROUTE_NOT_FOUND", True),  # no operation
    ],
)
def test_declares(operation_id: str | None, status: int, code: str, declared: bool) -> None:
    assert declares(operation_id, status, code) is declared


def test_the_error_mapping_logs_a_code_its_operation_does_not_declare(
    caplog: pytest.LogCaptureFixture, undeclared_codes_fail_the_test: Any
) -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/v1/topics/{topic}", operation_id="getTopic")
    async def get_topic(topic: str) -> None:
        if topic == "timer":
            raise TimerNotFoundError("no timer")
        raise TopicNotFoundError(f"no topic {topic}")

    with caplog.at_level(logging.ERROR, "app.errors"), serving(app) as running:
        base = f"http://127.0.0.1:{running.port}"
        declared = httpx.get(f"{base}/v1/topics/Orders")
        undeclared = httpx.get(f"{base}/v1/topics/timer")
    assert (declared.status_code, declared.json()["code"]) == (404, "TOPIC_NOT_FOUND")
    assert (undeclared.status_code, undeclared.json()["code"]) == (404, "TIMER_NOT_FOUND")
    assert [r.getMessage() for r in caplog.records] == [
        "operation getTopic answered 404 TIMER_NOT_FOUND, a code it does not declare"
    ]
    undeclared_codes_fail_the_test.lines.clear()  # this test made the line on purpose


def test_a_live_broker_answers_its_declared_codes(live_server: LiveServer) -> None:
    with live_server.client() as client:
        missing = client.get("/v1/topics/NoSuchTopic")
        ended = client.post(
            "/v1/transactions/0123456789abcdef0123456789abcdef/commit",
            json={"producer_group": "pg"},
        )
    assert missing.json()["code"] == "TOPIC_NOT_FOUND"
    assert ended.json()["code"] in OPERATION_CODES["commitTransaction"]
