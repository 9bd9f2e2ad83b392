"""Errors of POP consumption (each has a stable code the HTTP layer maps to a status)."""

from __future__ import annotations

from typing import ClassVar

from services.errors import InvalidRequestError, ServiceError


class ConsumeModeConflictError(ServiceError):
    """The group consumes by offsets and was asked to receive, or the other way round."""

    code: ClassVar[str] = "CONSUME_MODE_CONFLICT"


class InvalidReceiptHandleError(InvalidRequestError):
    """A receipt handle that this store did not issue, was mangled, or was replaced."""

    code: ClassVar[str] = "INVALID_RECEIPT_HANDLE"


class ReceiptHandleExpiredError(ServiceError):
    """The handle's invisibility ran out: the message may already be with someone else."""

    code: ClassVar[str] = "RECEIPT_HANDLE_EXPIRED"
