"""errors: one tree of the failures of the Spark jobs' HTTP client (source, sink, replay)."""

from __future__ import annotations

from spark_jobs.errors import (
    AuthenticationError,
    BrokerRefusedError,
    BrokerUnavailableError,
    DataLossError,
    IdempotencyKeyReusedError,
    OutcomeUnknownError,
    PermissionDeniedError,
    SpoolmqError,
    UnknownTopicError,
)


def test_every_failure_is_a_spoolmq_error_and_refusals_keep_status_and_code() -> None:
    for refusal in (
        AuthenticationError,
        PermissionDeniedError,
        UnknownTopicError,
        IdempotencyKeyReusedError,
    ):
        assert issubclass(refusal, BrokerRefusedError)
    assert issubclass(OutcomeUnknownError, BrokerUnavailableError)
    assert all(
        issubclass(cls, SpoolmqError)
        for cls in (BrokerRefusedError, BrokerUnavailableError, DataLossError)
    )
    error = UnknownTopicError("topic T does not exist", 404, "TOPIC_NOT_FOUND")
    assert (str(error), error.status, error.code) == (
        "topic T does not exist",
        404,
        "TOPIC_NOT_FOUND",
    )
