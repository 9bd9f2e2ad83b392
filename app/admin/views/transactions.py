"""Open transactions for people: age, checks, producer group and state of every half message
still waiting for an end, and buttons to commit or roll one back (an operator ending a
transaction its producer gave up on, e.g. one in TRANS_CHECK_MAX_TIME_TOPIC). Everything goes
through :class:`services.TransactionService`, as ``/v1/transactions`` does."""

from __future__ import annotations

import time

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.problems import AdminRoute
from app.admin.rendering import PREFIX, redirect, render
from app.deps import BrokerDep

router = APIRouter(route_class=AdminRoute)


@router.get("/transactions", name="admin-transactions")
async def list_transactions(request: Request, broker: BrokerDep) -> Response:
    transactions = broker.transactions
    context = {
        "title": "Transactions",
        "nav": "transactions",
        "now_ms": time.time_ns() // 1_000_000,
        "interval_ms": transactions.config.check_interval_ms,
        "check_max": transactions.config.check_max,
        "items": transactions.unresolved(),
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
