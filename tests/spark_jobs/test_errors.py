"""errors: one tree of the failures of the Spark jobs' HTTP client (source, sink, replay)."""

from __future__ import annotations

from spark_jobs.errors import (
    AuthenticationError,
    BrokerRefusedError,
    BrokerUnavailableError,
    DataLossError,
    IdempotencyKeyReusedError,
    LostOffsets,
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


def test_a_data_loss_lists_every_queue_with_its_lost_offsets_then_the_advice() -> None:
    error = DataLossError(
        [LostOffsets("Orders", 0, 20, 395), LostOffsets("Orders", 3, 1000, 3000)],
        "Set failOnDataLoss=false.",
    )
    assert str(error) == (
        "Offsets the query needs are no longer stored (2,375 in 2 queues): "
        "Orders/0: offsets 20 to 394 (375 messages); "
        "Orders/3: offsets 1000 to 2999 (2,000 messages). Set failOnDataLoss=false."
    )
    assert [loss.count for loss in error.losses] == [375, 2000]
    one = DataLossError([LostOffsets("Orders", 1, 7, 8)], "Restart.")
    assert str(one).startswith("Offsets the query needs are no longer stored (1 in 1 queue): ")
