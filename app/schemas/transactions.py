"""Request and response bodies of transactional messages: half send, end, check-back."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import AfterValidator, Field, WithJsonSchema

from app.schemas.common import (
    GROUP_MAX_LENGTH,
    TOPIC_PATTERN,
    JsonInt,
    RequestBody,
    ResponseBody,
    checked_group_name,
)
from app.schemas.messages import message_out
from app.schemas.send import SendMessage
from services import CheckOffer, Ended, Transaction

MAX_CHECK_IMMUNITY_S: Final = 3600
MAX_CHECKS_PER_POLL: Final = 32
MIN_LEASE_MS: Final = 1_000
MAX_LEASE_MS: Final = 300_000

ProducerGroup = Annotated[
    str,
    AfterValidator(checked_group_name),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": GROUP_MAX_LENGTH,
            "pattern": TOPIC_PATTERN,
            "description": f"Producer group name: 1 to {GROUP_MAX_LENGTH} of "
            "`a-z A-Z 0-9 _ - % |`. Only this group ends the transaction and is asked "
            "about it.",
        }
    ),
]


class TransactionSendIn(RequestBody):
    """A half message: stored, invisible in its topic until committed."""

    producer_group: ProducerGroup
    message: SendMessage
    check_immunity_s: JsonInt | None = Field(
        default=None,
        ge=0,
        le=MAX_CHECK_IMMUNITY_S,
        description=(
            "Do not ask the producer group about it before this many seconds "
            "(CHECK_IMMUNITY_TIME_IN_SECONDS; never earlier than the broker's "
            "transaction_timeout)."
        ),
    )


class HalfOut(ResponseBody):
    """Where the half message is: RocketMQ's tranStateTableOffset and commitLogOffset."""

    msg_id: str
    queue_offset: int = Field(description="Its offset in RMQ_SYS_TRANS_HALF_TOPIC queue 0.")
    commit_log_offset: int
    store_timestamp: int = Field(description="Ms since the epoch; a commit keeps it.")


class TransactionOut(ResponseBody):
    transaction_id: str = Field(description="End it with POST /v1/transactions/{id}/commit.")
    producer_group: str
    topic: str = Field(description="The topic it is delivered to once committed.")
    queue_id: int
    state: Literal["open", "gave_up", "committed", "rolled_back"] = Field(
        description=(
            "`open`: waiting for an end, checked back when due. `gave_up`: checked the "
            "maximum number of times, copied to TRANS_CHECK_MAX_TIME_TOPIC; it may still be "
            "committed or rolled back. `committed`, `rolled_back`: ended."
        )
    )
    checks: int = Field(description="How many times the producer group was asked.")
    next_check_at: int | None = Field(
        description="When it is checked next (ms since the epoch); null once ended or given up."
    )
    half: HalfOut


def transaction_out(transaction: Transaction, check_interval_ms: int) -> TransactionOut:
    next_check = transaction.next_check_ms(check_interval_ms) if transaction.open else None
    return TransactionOut(
        transaction_id=transaction.transaction_id,
        producer_group=transaction.producer_group,
        topic=transaction.topic,
        queue_id=transaction.queue_id,
        state=transaction.state.value,
        checks=transaction.checks,
        next_check_at=next_check,
        half=half_out(transaction),
    )


def half_out(transaction: Transaction) -> HalfOut:
    return HalfOut(
        msg_id=transaction.half_msg_id,
        queue_offset=transaction.half_offset,
        commit_log_offset=transaction.commit_log_offset,
        store_timestamp=transaction.store_timestamp,
    )


class TransactionListOut(ResponseBody):
    transactions: list[TransactionOut] = Field(description="Open and given-up, oldest first.")


class EndIn(RequestBody):
    producer_group: ProducerGroup


class CommittedOut(ResponseBody):
    """The message a commit stored in the real topic."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int = Field(description="-1 while a delayed message waits for its time.")
    commit_log_offset: int
    store_timestamp: int = Field(description="The half message's store time.")


class EndOut(ResponseBody):
    transaction_id: str
    state: Literal["committed", "rolled_back"]
    repeated: bool = Field(
        description="An earlier commit (or rollback) had ended it so: nothing was stored now."
    )
    message: CommittedOut | None = Field(description="The committed message; null on rollback.")


def end_out(ended: Ended) -> EndOut:
    stored = ended.message
    committed = None
    if stored is not None:
        delayed = stored.topic != ended.transaction.topic  # in the schedule or timer topic
        committed = CommittedOut(
            msg_id=stored.msg_id,
            topic=ended.transaction.topic,
            queue_id=ended.transaction.queue_id,
            queue_offset=-1 if delayed else stored.queue_offset,
            commit_log_offset=stored.physical_offset,
            store_timestamp=stored.store_timestamp,
        )
    state = ended.transaction.state.value
    return EndOut(
        transaction_id=ended.transaction.transaction_id,
        state="committed" if state == "committed" else "rolled_back",
        repeated=ended.repeated,
        message=committed,
    )


class CheckPollIn(RequestBody):
    max_checks: JsonInt = Field(default=16, ge=1, le=MAX_CHECKS_PER_POLL)
    wait_ms: JsonInt = Field(
        default=0, ge=0, le=30_000, description="Long-poll this long when no check is due."
    )
    lease_ms: JsonInt = Field(
        default=60_000,
        ge=MIN_LEASE_MS,
        le=MAX_LEASE_MS,
        description="How long a check is this poller's alone; unanswered, it is offered again.",
    )
    body_encoding: Literal["auto", "base64"] = "auto"


class CheckedMessageOut(ResponseBody):
    """The half message as its producer sent it. It has no offset in its topic until it is
    committed: where it is stored now is the check's ``half``."""

    topic: str = Field(description="The topic it is delivered to once committed.")
    queue_id: int = Field(description="The queue of `topic` it is delivered to once committed.")
    body: str
    body_encoding: Literal["utf-8", "base64"]
    tags: str | None
    keys: list[str]
    properties: dict[str, str] = Field(
        description="Its properties but TAGS and KEYS, without those of the half alone "
        "(TRAN_MSG, REAL_TOPIC, REAL_QID, ...)."
    )
    born_timestamp: int


_CHECKED_FIELDS: Final = tuple(
    name for name in CheckedMessageOut.model_fields if name not in ("topic", "queue_id")
)


class CheckOut(ResponseBody):
    transaction_id: str
    checks: int = Field(description="1 on the first check.")
    leased_until: int = Field(description="Ms since the epoch; then another poller may get it.")
    half: HalfOut = Field(
        description="Where the half message is stored: its offset in "
        "RMQ_SYS_TRANS_HALF_TOPIC queue 0 and in the CommitLog."
    )
    message: CheckedMessageOut = Field(
        description="The half message as sent, with the topic and queue it goes to once committed."
    )


class CheckPollOut(ResponseBody):
    producer_group: str
    checks: list[CheckOut]


def check_poll_out(group: str, offers: list[CheckOffer], encoding: str) -> dict[str, object]:
    checks = []
    for offer in offers:
        transaction = offer.transaction
        checks.append(
            {
                "transaction_id": transaction.transaction_id,
                "checks": transaction.checks,
                "leased_until": offer.leased_until_ms,
                "half": half_out(transaction).model_dump(),
                "message": checked_message_out(offer, encoding),
            }
        )
    return {"producer_group": group, "checks": checks}


def checked_message_out(offer: CheckOffer, encoding: str) -> dict[str, object]:
    """The offered half as :class:`CheckedMessageOut`: its content under the topic and queue
    of its transaction."""
    content = message_out(offer.half, encoding)
    transaction = offer.transaction
    return {
        "topic": transaction.topic,
        "queue_id": transaction.queue_id,
        **{name: content[name] for name in _CHECKED_FIELDS},
    }
