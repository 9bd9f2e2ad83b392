"""Each domain error code answers one ``apache.rocketmq.v2.Code``."""

from __future__ import annotations

from app.grpc.codes import CODE_BY_PROBLEM, code_of
from app.grpc.protocol import Code
from app.problem_codes import STATUS_BY_CODE


def test_every_mapped_code_is_a_domain_code() -> None:
    assert set(CODE_BY_PROBLEM) <= set(STATUS_BY_CODE)


def test_named_codes_answer_rocketmqs_own() -> None:
    assert code_of("TOPIC_NOT_FOUND") == Code.TOPIC_NOT_FOUND
    assert code_of("INVALID_RECEIPT_HANDLE") == Code.INVALID_RECEIPT_HANDLE
    assert code_of("TOO_MANY_WAITERS") == Code.TOO_MANY_REQUESTS
    assert code_of("INVALID_OFFSET") == Code.ILLEGAL_OFFSET
    assert code_of("TIMER_ALREADY_DELIVERED") == Code.PRECONDITION_FAILED  # too late to recall


def test_a_group_without_a_master_for_now_is_ha_not_available_not_an_internal_error() -> None:
    for problem in ("NO_MASTER", "NOT_MASTER", "BROKER_UNAVAILABLE", "MASTER_ROLE_LOST"):
        assert code_of(problem) == Code.HA_NOT_AVAILABLE, problem


def test_other_codes_answer_by_their_http_status_and_a_client_mistake_is_never_internal() -> None:
    assert code_of("BATCH_REJECTED") == Code.BAD_REQUEST  # 422
    assert code_of("CONSUME_MODE_CONFLICT") == Code.PRECONDITION_FAILED  # 409
    for problem, http_status in STATUS_BY_CODE.items():
        if 400 <= http_status < 500 and problem != "NOT_MASTER":  # 421: ask the master
            assert code_of(problem) < Code.INTERNAL_ERROR, problem
    assert code_of("NO_SUCH_CODE") == Code.INTERNAL_SERVER_ERROR
