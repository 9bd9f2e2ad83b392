"""Transactional messages: half send, commit and rollback, check-back polls."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from starlette.responses import Response

from app.deps import BrokerDep, born_host, disconnect_watch
from app.responses import OrjsonResponse
from app.routes.params import ProducerGroupPath, TopicPath
from app.schemas.send import outgoing
from app.schemas.transactions import (
    CheckPollIn,
    CheckPollOut,
    EndIn,
    EndOut,
    ProducerGroup,
    TransactionListOut,
    TransactionOut,
    TransactionSendIn,
    check_poll_out,
    end_out,
    transaction_out,
)

router = APIRouter(tags=["transactions"])

TransactionIdPath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=255,
        description="The transaction id the half send answered (its UNIQ_KEY).",
    ),
]


@router.post(
    "/v1/topics/{topic}/transactions",
    operation_id="sendHalfMessage",
    summary="Send a half message: stored, invisible until its transaction is committed",
    description=(
        "RocketMQ's transactional send. The message waits in RMQ_SYS_TRANS_HALF_TOPIC; "
        "pulls, receives and key lookups of the topic do not see it. Run the local "
        "transaction, then commit or roll back with the answered `transaction_id`. A "
        "transaction left open is offered to its producer group's check polls after "
        "`transaction_timeout`, then every `transaction_check_interval`, at most "
        "`transaction_check_max` times; then it goes to TRANS_CHECK_MAX_TIME_TOPIC. A delay "
        "level or `deliver_after_ms` counts from the commit; `deliver_at` is a time (one "
        "passed by the commit delivers at once). A delivery time the timer cannot take is "
        "refused here, never at the commit."
    ),
    status_code=201,
    response_model=TransactionOut,
)
async def send_half_message(
    topic: TopicPath, body: TransactionSendIn, request: Request, broker: BrokerDep
) -> TransactionOut:
    prepared = await broker.transactions.prepare(
        topic,
        outgoing(body.message.model_dump(), ("body", "message")),
        body.producer_group,
        born_host=born_host(request),
        check_immunity_s=body.check_immunity_s,
    )
    return transaction_out(prepared.transaction, broker.transactions.config.check_interval_ms)


@router.get(
    "/v1/transactions/{transaction_id}",
    operation_id="getTransaction",
    summary="A transaction's state, checks and half message",
    response_model=TransactionOut,
)
async def get_transaction(transaction_id: TransactionIdPath, broker: BrokerDep) -> TransactionOut:
    transactions = broker.transactions
    found = transactions.transaction(transaction_id)
    return transaction_out(found, transactions.config.check_interval_ms)


@router.get(
    "/v1/transactions",
    operation_id="listTransactions",
    summary="Transactions waiting for an end: open and given up, oldest first",
    response_model=TransactionListOut,
)
async def list_transactions(
    broker: BrokerDep,
    producer_group: Annotated[ProducerGroup | None, Query(description="Only this group's.")] = None,
) -> TransactionListOut:
    transactions = broker.transactions
    interval = transactions.config.check_interval_ms
    return TransactionListOut(
        transactions=[transaction_out(t, interval) for t in transactions.unresolved(producer_group)]
    )


_END_DESCRIPTION = (
    "Idempotent: a second {verb} answers the first outcome (`repeated: true`) and stores "
    "nothing, also after a restart; {other} after {noun} is 409 TRANSACTION_ALREADY_ENDED; "
    "another producer group is 403 PRODUCER_GROUP_MISMATCH. Answered once durable."
)


def _end_route(
    how: str, *, commit: bool, operation_id: str, summary: str, description: str
) -> None:
    """``POST /v1/transactions/{transaction_id}/{how}``: commit or roll back."""

    async def end_transaction(
        transaction_id: TransactionIdPath, body: EndIn, broker: BrokerDep
    ) -> EndOut:
        ended = await broker.transactions.end(transaction_id, body.producer_group, commit=commit)
        return end_out(ended)

    end_transaction.__name__ = f"{how}_transaction"
    router.post(
        f"/v1/transactions/{{transaction_id}}/{how}",
        operation_id=operation_id,
        summary=summary,
        description=description,
        response_model=EndOut,
    )(end_transaction)


_end_route(
    "commit",
    commit=True,
    operation_id="commitTransaction",
    summary="Commit: the message becomes visible in its topic, exactly once",
    description="The message is stored in its topic with the half's store time. "
    + _END_DESCRIPTION.format(verb="commit", other="a rollback", noun="a commit"),
)
_end_route(
    "rollback",
    commit=False,
    operation_id="rollbackTransaction",
    summary="Roll back: the message is never delivered",
    description=_END_DESCRIPTION.format(verb="rollback", other="a commit", noun="a rollback"),
)


@router.post(
    "/v1/transactions/{transaction_id}/unknown",
    operation_id="answerTransactionUnknown",
    summary="Answer a check with UNKNOWN: ask again at the next check",
    description="Gives the check back before its lease ends; the transaction stays open. "
    "On an ended transaction (committed or rolled back) it is 409 "
    "TRANSACTION_ALREADY_ENDED, as a commit or rollback the other way is.",
    status_code=204,
)
async def answer_unknown(
    transaction_id: TransactionIdPath, body: EndIn, broker: BrokerDep
) -> Response:
    broker.transactions.release_check(transaction_id, body.producer_group)
    return Response(status_code=204)


@router.post(
    "/v1/producer-groups/{group}/transaction-checks",
    operation_id="pollTransactionChecks",
    summary="Long-poll the checks of a producer group: transactions the broker asks about",
    description=(
        "RocketMQ's check-back (CHECK_TRANSACTION_STATE) as a poll: each due check goes to one "
        "poller of the group, leased for `lease_ms`. Answer with commit, rollback or unknown "
        "on /v1/transactions/{transaction_id}. An empty long-poll answers 200 with no checks. "
        "With tokens, the token needs the producer group, and a poll gets only the checks "
        "of topics it may produce to."
    ),
    response_model=CheckPollOut,
)
async def poll_transaction_checks(
    group: ProducerGroupPath, body: CheckPollIn, request: Request, broker: BrokerDep
) -> Response:
    caller = getattr(request.state, "caller", None)  # None: no tokens, every topic
    offers = await broker.transactions.poll_checks(
        group,
        max_checks=body.max_checks,
        wait_ms=body.wait_ms,
        lease_ms=body.lease_ms,
        abandon=disconnect_watch(request) if body.wait_ms else None,
        topic_allowed=None if caller is None else caller.may_produce,
    )
    return OrjsonResponse(check_poll_out(group, offers, body.body_encoding))
