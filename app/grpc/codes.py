"""The ``apache.rocketmq.v2.Code`` of each domain error code: what RocketMQ's proxy answers.

The gRPC face's rulebook of error answers, as :mod:`app.problem_codes` is the HTTP API's: the
same domain codes (``TopicNotFoundError.code`` and the rest), each mapped once. A code not
listed answers by its HTTP status class (:data:`CODE_BY_STATUS`), so a new domain code is never
an internal error by accident: a 4xx stays the client's mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from app.grpc.protocol import Code
from app.problem_codes import STATUS_BY_CODE

CODE_BY_PROBLEM: Final[Mapping[str, int]] = {
    "TOPIC_NOT_FOUND": Code.TOPIC_NOT_FOUND,
    "GROUP_NOT_FOUND": Code.CONSUMER_GROUP_NOT_FOUND,
    "MESSAGE_NOT_FOUND": Code.MESSAGE_NOT_FOUND,
    "INVALID_TOPIC_NAME": Code.ILLEGAL_TOPIC,
    "SYSTEM_TOPIC": Code.ILLEGAL_TOPIC,
    "INVALID_GROUP_NAME": Code.ILLEGAL_CONSUMER_GROUP,
    "INVALID_MESSAGE_ID": Code.ILLEGAL_MESSAGE_ID,
    "INVALID_PROPERTY": Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    "INVALID_FILTER": Code.ILLEGAL_FILTER_EXPRESSION,
    "INVALID_RECEIPT_HANDLE": Code.INVALID_RECEIPT_HANDLE,
    "INVALID_OFFSET": Code.ILLEGAL_OFFSET,
    "RECEIPT_HANDLE_EXPIRED": Code.INVALID_RECEIPT_HANDLE,
    "TIMER_MESSAGE_ILLEGAL": Code.ILLEGAL_DELIVERY_TIME,
    "MESSAGE_ILLEGAL": Code.BAD_REQUEST,
    "MESSAGE_TOO_LARGE": Code.MESSAGE_BODY_TOO_LARGE,
    "PROPERTIES_TOO_LARGE": Code.MESSAGE_PROPERTIES_TOO_LARGE,
    "TRANSACTION_NOT_FOUND": Code.INVALID_TRANSACTION_ID,
    "TRANSACTION_ALREADY_ENDED": Code.INVALID_TRANSACTION_ID,
    "TOO_MANY_WAITERS": Code.TOO_MANY_REQUESTS,
    "RATE_LIMITED": Code.TOO_MANY_REQUESTS,
    "UNAUTHORIZED": Code.UNAUTHORIZED,
    "TIMER_NOT_ENABLED": Code.NOT_IMPLEMENTED,
    "IDEMPOTENCY_UNAVAILABLE": Code.NOT_IMPLEMENTED,
    "NOT_ENOUGH_IN_SYNC_REPLICAS": Code.SLAVE_PERSISTENCE_TIMEOUT,
    "STORE_FLUSH_FAILED": Code.MASTER_PERSISTENCE_TIMEOUT,
    "NOT_MASTER": Code.HA_NOT_AVAILABLE,
    "NO_MASTER": Code.HA_NOT_AVAILABLE,
    "BROKER_UNAVAILABLE": Code.HA_NOT_AVAILABLE,
    "MASTER_ROLE_LOST": Code.HA_NOT_AVAILABLE,
    "OUTCOME_UNKNOWN": Code.PROXY_TIMEOUT,
}
"""The domain codes whose meaning RocketMQ's ``Code`` names exactly."""

CODE_BY_STATUS: Final[Mapping[int, int]] = {
    400: Code.BAD_REQUEST,
    401: Code.UNAUTHORIZED,
    403: Code.FORBIDDEN,
    404: Code.NOT_FOUND,
    405: Code.BAD_REQUEST,
    408: Code.REQUEST_TIMEOUT,
    409: Code.PRECONDITION_FAILED,
    413: Code.PAYLOAD_TOO_LARGE,
    415: Code.BAD_REQUEST,
    421: Code.HA_NOT_AVAILABLE,
    422: Code.BAD_REQUEST,
    429: Code.TOO_MANY_REQUESTS,
    501: Code.NOT_IMPLEMENTED,
    504: Code.PROXY_TIMEOUT,
}
"""Every other domain code, by its HTTP status; a status not here is a server error."""


def code_of(problem: str) -> int:
    """The ``Code`` a domain error code answers (``INTERNAL_SERVER_ERROR`` for one unknown)."""
    code = CODE_BY_PROBLEM.get(problem)
    if code is not None:
        return code
    return CODE_BY_STATUS.get(STATUS_BY_CODE.get(problem, 500), Code.INTERNAL_SERVER_ERROR)
