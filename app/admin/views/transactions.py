"""Open transactions for people: age, checks, producer group and state of every half message
still waiting for an end, what the half message holds (keys, properties, the start of its
body), and buttons to commit or roll one back (an operator ending a transaction its producer
gave up on, e.g. one in TRANS_CHECK_MAX_TIME_TOPIC); a rollback asks first. Everything goes
through :class:`services.TransactionService`, as ``/v1/transactions`` does, and the half
message through :class:`services.messages.MessageQueryService`, as ``/v1/messages`` does."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.problems import AdminRoute
from app.admin.rendering import PREFIX, redirect, render
from app.deps import BrokerDep
from services import Broker, Transaction, TransactionState
from services.errors import MessageNotFoundError
from storage.record.message import StoredMessage

router = APIRouter(route_class=AdminRoute)

STATE_LABELS: Final = {
    state: "given up" if state is TransactionState.GAVE_UP else state.value.replace("_", " ")
    for state in TransactionState
}
"""A transaction's state in words (the API says it with the enum's value)."""


@dataclass(frozen=True, slots=True)
class TransactionRow:
    transaction: Transaction
    half: StoredMessage | None  # None: its record has expired from the CommitLog


def half_message(broker: Broker, transaction: Transaction) -> StoredMessage | None:
    """The half message a transaction would commit or roll back."""
    try:
        return broker.messages.by_id(transaction.half_msg_id)
    except MessageNotFoundError:
        return None


@router.get("/transactions", name="admin-transactions")
async def list_transactions(request: Request, broker: BrokerDep) -> Response:
    transactions = broker.transactions
    rows = [TransactionRow(t, half_message(broker, t)) for t in transactions.unresolved()]
    context = {
        "title": "Transactions",
        "nav": "transactions",
        "now_ms": time.time_ns() // 1_000_000,
        "interval_ms": transactions.config.check_interval_ms,
        "check_max": transactions.config.check_max,
        "rows": rows,
        "state_labels": STATE_LABELS,
        "ended": request.query_params.get("ended", ""),
    }
    return render(request, "transactions.html", context)


@router.post("/transactions/{transaction_id}/{action}", name="admin-transaction-end")
async def end_transaction(
    request: Request, transaction_id: str, action: str, broker: BrokerDep
) -> Response:
    """``commit`` or ``rollback``, on behalf of the transaction's producer group."""
    transactions = broker.transactions
    found = transactions.transaction(transaction_id)
    commit = action == "commit"
    if not commit and action != "rollback":
        return redirect(request, f"{PREFIX}/transactions")
    await transactions.end(transaction_id, found.producer_group, commit=commit)
    done = "committed" if commit else "rolled back"
    return redirect(request, f"{PREFIX}/transactions?ended={transaction_id}+{done}")
