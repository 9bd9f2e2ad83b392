"""Transactional (half) messages, RocketMQ's design (reference: wave3 §1).

- :mod:`~services.transaction.records`: the half message, its check copies, the committed
  message, the op and check-max records;
- :mod:`~services.transaction.table`: every transaction's state, rebuilt from those records;
- :mod:`~services.transaction.ops`: op records, batched;
- :mod:`~services.transaction.halves`: half messages sent together, appended as one batch;
- :mod:`~services.transaction.service`: half send, idempotent commit and rollback, check
  offers that producers long-poll;
- :mod:`~services.transaction.check`: the task that checks back due halves.
"""

from services.transaction.service import (
    CheckOffer,
    Ended,
    Prepared,
    TransactionConfig,
    TransactionService,
)
from services.transaction.table import Transaction, TransactionState

__all__ = [
    "CheckOffer",
    "Ended",
    "Prepared",
    "Transaction",
    "TransactionConfig",
    "TransactionService",
    "TransactionState",
]
