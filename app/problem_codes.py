"""Problem codes: each one's HTTP status and meaning, and the codes each operation answers.

The one rulebook of the error answers: :data:`STATUS_BY_CODE` gives a code its status (the
error mapping of :mod:`app.errors` answers with it), :data:`MEANINGS` says what a code tells a
client, and :data:`OPERATION_CODES` lists, by operationId, the codes an operation's own rules
can answer. :func:`operation_codes` adds the codes every operation of its kind answers (a
request body's, security's, a write's); the OpenAPI document lists them per status (with
their meanings, and as the ``code`` enum of the answer's schema), and the error mapping logs
any code it answers that the operation does not declare (:func:`declares`), which the test
suite turns into a failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

PROBLEM_CODES_KEY: Final = "x-problem-codes"
"""The OpenAPI extension of a problem answer that lists its codes (also the ``code`` enum)."""

STATUS_BY_CODE: Final[Mapping[str, int]] = {
    # the roots of the two trees: never raised as they are
    "SERVICE_ERROR": 500,
    "STORAGE_ERROR": 500,
    # services
    "NOT_FOUND": 404,
    "TOPIC_NOT_FOUND": 404,
    "GROUP_NOT_FOUND": 404,
    "QUEUE_NOT_FOUND": 404,
    "MESSAGE_NOT_FOUND": 404,
    "INVALID_REQUEST": 400,
    "INVALID_GROUP_NAME": 400,
    "INVALID_MESSAGE_ID": 400,
    "INVALID_OFFSET": 409,  # the queue holds other offsets now
    "INVALID_PROPERTY": 422,
    "INVALID_TOPIC_CONFIG": 422,
    "BATCH_REJECTED": 422,
    "INVALID_IDEMPOTENCY_KEY": 400,
    "IDEMPOTENCY_KEY_REUSED": 422,
    "KEY_INDEX_CATCHING_UP": 503,
    "IDEMPOTENCY_UNAVAILABLE": 501,
    "FORBIDDEN": 403,
    "SYSTEM_TOPIC": 403,
    "TOPIC_NOT_WRITEABLE": 403,
    "TOPIC_NOT_READABLE": 403,
    "CONSUME_DISABLED": 403,
    "TOO_MANY_WAITERS": 429,
    "REDRIVE_TOO_LONG": 422,
    "REDRIVE_JOB_NOT_FOUND": 404,
    "TOO_MANY_REDRIVE_JOBS": 409,
    "BROKER_UNAVAILABLE": 503,
    "CONSUME_MODE_CONFLICT": 409,
    "INVALID_RECEIPT_HANDLE": 400,
    "RECEIPT_HANDLE_EXPIRED": 409,
    "TRANSACTION_NOT_FOUND": 404,
    "PRODUCER_GROUP_MISMATCH": 403,
    "TRANSACTION_ALREADY_ENDED": 409,
    "TRANSACTION_END_UNREPLICATED": 503,
    "TRANSACTION_ID_IN_USE": 409,
    "TIMER_NOT_FOUND": 404,
    "INVALID_TIMER_HANDLE": 400,
    "INVALID_FILTER": 400,
    "TIMER_ALREADY_DELIVERED": 409,
    "NO_MASTER": 503,
    "NOT_MASTER": 421,
    "REPLICA_DIVERGED": 409,
    "REPLICA_ROLE_CONFLICT": 409,
    "ROUTE_CONFLICT": 409,
    "ETCD_UNAVAILABLE": 503,
    "OUTCOME_UNKNOWN": 504,
    "ETCD_ERROR": 502,
    "CLUSTER_JOIN_FAILED": 503,
    "MASTER_ROLE_LOST": 503,
    # storage
    "MESSAGE_ILLEGAL": 400,
    "INVALID_TOPIC_NAME": 400,
    "MESSAGE_TOO_LARGE": 413,
    "PROPERTIES_TOO_LARGE": 413,
    "TIMER_MESSAGE_ILLEGAL": 400,
    "TIMER_NOT_ENABLED": 501,
    "STORE_NOT_WRITEABLE": 503,
    "DISK_FULL": 503,
    "STORE_FLUSH_FAILED": 503,
    "STORE_CLOSED": 503,
    "NOT_ENOUGH_IN_SYNC_REPLICAS": 503,
    "REPLICA_APPEND_REJECTED": 409,
    "STORE_LOCKED": 503,
    "STORE_LOAD_FAILED": 503,
    "CONFIG_FILE_UNREADABLE": 503,
    "CORRUPT_RECORD": 500,
    # the HTTP shell
    "MALFORMED_JSON": 400,
    "UNSUPPORTED_MEDIA_TYPE": 415,
    "INVALID_BODY_ENCODING": 422,
    "PARAMETER_NOT_ALLOWED": 422,
    "VALIDATION_FAILED": 422,
    "REQUEST_TOO_LARGE": 413,
    "ROUTE_NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "REQUEST_TIMEOUT": 408,
    "INTERNAL_ERROR": 500,
    # security (app/security): refused before the route runs
    "UNAUTHORIZED": 401,
    "CSRF_FAILED": 403,
    "RATE_LIMITED": 429,
    "LOGIN_REQUIRED": 303,
}
"""Status of every stable code; a code missing here is a 500 (a bug, logged)."""

MEANINGS: Final[Mapping[str, str]] = {
    "TOPIC_NOT_FOUND": "no such topic (and the broker does not create topics on first send)",
    "GROUP_NOT_FOUND": "no such consumer group (and the broker does not create groups on use)",
    "QUEUE_NOT_FOUND": "no such queue: the queue id is not below the topic's queue count",
    "MESSAGE_NOT_FOUND": "no message with this id (or it was deleted with its CommitLog file)",
    "INVALID_REQUEST": "the request breaks a rule of the operation (the detail says which)",
    "INVALID_GROUP_NAME": "the group name is not 1 to 255 of `a-z A-Z 0-9 _ - % |`",
    "INVALID_MESSAGE_ID": "not a message id (32 hex characters; 56 for IPv6)",
    "INVALID_OFFSET": "the offset is outside the queue (below its min or above its max)",
    "INVALID_PROPERTY": "a key or property breaks a rule (reserved name, a separator character)",
    "INVALID_TOPIC_CONFIG": "the topic's settings contradict each other or a queue in use",
    "BATCH_REJECTED": "a batch breaks a batch rule (one queue, all timed or none, a size limit)",
    "INVALID_IDEMPOTENCY_KEY": "the Idempotency-Key header is malformed or given twice",
    "IDEMPOTENCY_KEY_REUSED": "the Idempotency-Key was used inside the window for another "
    "payload: a retry repeats the request exactly, a new message takes a new key",
    "KEY_INDEX_CATCHING_UP": "the key index is being rebuilt after an unclean restart; "
    "nothing was written: retry with the same key",
    "IDEMPOTENCY_UNAVAILABLE": "an Idempotency-Key on a broker running without the message index",
    "FORBIDDEN": "the token lacks the permission this needs",
    "SYSTEM_TOPIC": "a system topic cannot be written, changed or deleted here",
    "TOPIC_NOT_WRITEABLE": "the topic's perm does not allow writes",
    "TOPIC_NOT_READABLE": "the topic's perm does not allow reads",
    "CONSUME_DISABLED": "the group has consuming turned off",
    "TOO_MANY_WAITERS": "too many long-polls are waiting; retry after `Retry-After` seconds",
    "REDRIVE_TOO_LONG": "the paced redrive would take too long for one call: create a job",
    "REDRIVE_JOB_NOT_FOUND": "the group has no redrive job with this id",
    "TOO_MANY_REDRIVE_JOBS": "too many redrive jobs are queued or running: cancel one or wait",
    "BROKER_UNAVAILABLE": "the broker is starting or stopping; retry after `Retry-After` seconds",
    "CONSUME_MODE_CONFLICT": "the group consumes the other way (offsets against receive/ack)",
    "INVALID_RECEIPT_HANDLE": "not a receipt handle this broker gave",
    "RECEIPT_HANDLE_EXPIRED": "the receipt handle's invisibility ran out (the message may "
    "have been received again)",
    "TRANSACTION_NOT_FOUND": "no such transaction (or it ended long ago)",
    "PRODUCER_GROUP_MISMATCH": "the transaction belongs to another producer group",
    "TRANSACTION_ALREADY_ENDED": "the transaction was already committed or rolled back",
    "TRANSACTION_END_UNREPLICATED": "the end is stored on this master only: no broker that "
    "could succeed it has it yet (its in-sync slave is out of reach); retry the same end",
    "TRANSACTION_ID_IN_USE": "the transaction id is taken by an open transaction",
    "TIMER_NOT_FOUND": "no timer message with this handle waits in this topic",
    "INVALID_TIMER_HANDLE": "not a timer handle this broker gave",
    "INVALID_FILTER": "the SQL92 filter does not parse (the detail says where, and what was "
    "expected there)",
    "TIMER_ALREADY_DELIVERED": "the timer message was already delivered",
    "NO_MASTER": "the broker group has no master right now (a failover is under way): retry",
    "NOT_MASTER": "this broker is a read-only slave: write to the master named in `master`",
    "MESSAGE_ILLEGAL": "the message breaks a rule of the store (an empty body, ...)",
    "INVALID_TOPIC_NAME": "the topic name is not 1 to 127 of `a-z A-Z 0-9 _ - % |`",
    "MESSAGE_TOO_LARGE": "a message is over the store's maximum size",
    "PROPERTIES_TOO_LARGE": "a message's properties are over 32767 bytes",
    "TIMER_MESSAGE_ILLEGAL": "the delivery time is too far ahead, or unreadable",
    "TIMER_NOT_ENABLED": "the broker runs without the timer wheel",
    "STORE_NOT_WRITEABLE": "the store refuses writes for now (its dispatch fell behind)",
    "DISK_FULL": "the disk is over its warning ratio: writes resume once space is back",
    "STORE_FLUSH_FAILED": "a flush to disk failed: nothing more is acknowledged until restart",
    "STORE_CLOSED": "the store is closing",
    "NOT_ENOUGH_IN_SYNC_REPLICAS": "fewer replicas are in sync than the master's "
    "--min-in-sync-replicas (itself included): nothing was stored; retry after `Retry-After` "
    "seconds, once a slave has caught up",
    "MALFORMED_JSON": "the request body is not valid JSON",
    "UNSUPPORTED_MEDIA_TYPE": "the body is not JSON (`curl -d` alone sends a form)",
    "INVALID_BODY_ENCODING": "a base64 body is not valid base64",
    "PARAMETER_NOT_ALLOWED": "a parameter does not go with this request (the detail says why)",
    "VALIDATION_FAILED": "a parameter or field has the wrong type or is out of bounds "
    "(each one in `errors`)",
    "REQUEST_TOO_LARGE": "the request body is over the limit (refused before it is read)",
    "REQUEST_TIMEOUT": "the request body stopped arriving",
    "ETCD_UNAVAILABLE": "the cluster's route table in etcd cannot be read or written now: "
    "retry after `Retry-After` seconds",
    "ETCD_ERROR": "etcd refused the route table's change",
    "OUTCOME_UNKNOWN": "the send may or may not have been stored: no broker confirmed it in "
    "time (retry with the Idempotency-Key the detail names)",
    "ROUTE_CONFLICT": "the topic already has a route over other broker groups or another "
    "queue count: its queues do not move between groups",
    "UNAUTHORIZED": "no bearer token, or not a valid one",
    "RATE_LIMITED": "the token is over its request rate; retry after `Retry-After` seconds",
}
"""What each code an operation documents tells a client."""

# ==================================================================== codes by kind

AVAILABILITY: Final = ("BROKER_UNAVAILABLE",)
"""Every operation of a broker: it may be starting or stopping."""
BODY: Final = ("MALFORMED_JSON", "UNSUPPORTED_MEDIA_TYPE", "REQUEST_TOO_LARGE", "REQUEST_TIMEOUT")
"""Every operation with a request body."""
PARAMETERS: Final = ("VALIDATION_FAILED",)
"""Every operation with a parameter or a body."""
AUTHENTICATED: Final = ("UNAUTHORIZED", "RATE_LIMITED")
"""Every operation that takes a token."""
PERMITTED: Final = ("FORBIDDEN",)
"""Every operation that needs a permission."""
WRITE: Final = ("NOT_MASTER", "NO_MASTER")
"""Every write: a slave refuses it, a group without a master cannot take it."""
STORE_WRITE: Final = (
    "STORE_NOT_WRITEABLE",
    "DISK_FULL",
    "STORE_FLUSH_FAILED",
    "STORE_CLOSED",
    "NOT_ENOUGH_IN_SYNC_REPLICAS",
)
"""Every operation that appends to the CommitLog."""
CLUSTER: Final = ("ETCD_UNAVAILABLE", "ETCD_ERROR", "OUTCOME_UNKNOWN", "ROUTE_CONFLICT")
"""What a proxy adds in front of the brokers."""

_TOPIC: Final = ("INVALID_TOPIC_NAME", "TOPIC_NOT_FOUND")
_LABELLED: Final = ("INVALID_REQUEST",)
"""An operation a proxy asks for cluster labels: a malformed Spoolmq-Queue-Ids header."""
_GROUP: Final = ("INVALID_GROUP_NAME", "GROUP_NOT_FOUND")
_MESSAGE: Final = (
    "SYSTEM_TOPIC",
    "TOPIC_NOT_WRITEABLE",
    "QUEUE_NOT_FOUND",
    "MESSAGE_ILLEGAL",
    "MESSAGE_TOO_LARGE",
    "PROPERTIES_TOO_LARGE",
    "INVALID_PROPERTY",
    "INVALID_BODY_ENCODING",
    "TIMER_MESSAGE_ILLEGAL",
    "TIMER_NOT_ENABLED",
    *STORE_WRITE,
)
"""The rules of a message wherever one is stored (a send, a half message)."""
_CONSUME: Final = (
    *_TOPIC,
    "TOPIC_NOT_READABLE",
    "INVALID_GROUP_NAME",
    "GROUP_NOT_FOUND",
    "CONSUME_DISABLED",
    "CONSUME_MODE_CONFLICT",
    "TOO_MANY_WAITERS",
)
_OFFSETS: Final = (*_GROUP, *_TOPIC, "QUEUE_NOT_FOUND", "INVALID_OFFSET", "CONSUME_MODE_CONFLICT")
_TRANSACTION_END: Final = (
    "INVALID_GROUP_NAME",
    "TRANSACTION_NOT_FOUND",
    "PRODUCER_GROUP_MISMATCH",
    "TRANSACTION_ALREADY_ENDED",
    *STORE_WRITE,
)
_REDRIVE: Final = (
    *_GROUP,
    "TOPIC_NOT_WRITEABLE",
    "REDRIVE_TOO_LONG",
    "INVALID_REQUEST",
    *STORE_WRITE,
)
_REDRIVE_JOB: Final = ("INVALID_GROUP_NAME", "REDRIVE_JOB_NOT_FOUND")

OPERATION_CODES: Final[Mapping[str, tuple[str, ...]]] = {
    # messages
    "sendMessages": (
        *_TOPIC,
        *_LABELLED,
        *_MESSAGE,
        "BATCH_REJECTED",
        "PARAMETER_NOT_ALLOWED",
        "INVALID_IDEMPOTENCY_KEY",
        "IDEMPOTENCY_KEY_REUSED",
        "KEY_INDEX_CATCHING_UP",
        "IDEMPOTENCY_UNAVAILABLE",
    ),
    "queryMessagesByKey": (*_TOPIC, "TOPIC_NOT_READABLE", *_LABELLED),
    "pullMessages": (
        *_CONSUME,
        "QUEUE_NOT_FOUND",
        "INVALID_REQUEST",
        "INVALID_OFFSET",
        "INVALID_FILTER",
    ),
    "readQueueRecords": (*_CONSUME, "QUEUE_NOT_FOUND", "INVALID_FILTER"),
    "getMessage": ("INVALID_MESSAGE_ID", "MESSAGE_NOT_FOUND"),
    "getMessageTrace": ("INVALID_MESSAGE_ID", "MESSAGE_NOT_FOUND"),
    "getMessageTraceByKey": ("MESSAGE_NOT_FOUND",),
    "getOffsetByTime": (*_TOPIC, "TOPIC_NOT_READABLE", "QUEUE_NOT_FOUND"),
    "getDelayLevels": (),
    # timers
    "cancelTimer": (
        *_TOPIC,
        "SYSTEM_TOPIC",
        "INVALID_TIMER_HANDLE",
        "TIMER_NOT_FOUND",
        "TIMER_ALREADY_DELIVERED",
        "TIMER_NOT_ENABLED",
        *STORE_WRITE,
    ),
    "getTimerStatus": (),
    # topics
    "listTopics": (),
    "getTopic": _TOPIC,
    "putTopic": ("INVALID_TOPIC_NAME", "SYSTEM_TOPIC", "INVALID_TOPIC_CONFIG"),
    "deleteTopic": (*_TOPIC, "SYSTEM_TOPIC"),
    "getTopicRoute": _TOPIC,
    # groups
    "listGroups": (),
    "getGroup": _GROUP,
    "putGroup": ("INVALID_GROUP_NAME", "INVALID_FILTER"),
    "deleteGroup": _GROUP,
    "pullGroupMessages": (*_CONSUME, "INVALID_REQUEST", "INVALID_FILTER"),
    "commitOffset": (*_OFFSETS, *_LABELLED),
    "commitOffsets": _OFFSETS,
    "getGroupOffsets": (*_GROUP, *_TOPIC),
    "resetOffsets": (*_OFFSETS, "INVALID_REQUEST"),
    "sendBack": (
        *_GROUP,
        "INVALID_MESSAGE_ID",
        "MESSAGE_NOT_FOUND",
        "CONSUME_DISABLED",
        "INVALID_REQUEST",
        *STORE_WRITE,
    ),
    # dead letters
    "listDeadLetters": (*_GROUP, "INVALID_REQUEST"),
    "redriveDeadLetters": _REDRIVE,
    "createRedriveJob": (*_REDRIVE, "TOO_MANY_REDRIVE_JOBS"),
    "listRedriveJobs": ("INVALID_GROUP_NAME",),
    "getRedriveJob": _REDRIVE_JOB,
    "deleteRedriveJob": _REDRIVE_JOB,
    "cancelRedriveJob": _REDRIVE_JOB,
    # POP
    "receiveMessages": (*_CONSUME, *_LABELLED, *STORE_WRITE, "INVALID_FILTER"),
    "ackMessages": (*_GROUP, "INVALID_RECEIPT_HANDLE", *STORE_WRITE),
    "changeInvisibility": (
        *_GROUP,
        *_LABELLED,
        "INVALID_RECEIPT_HANDLE",
        "RECEIPT_HANDLE_EXPIRED",
        *STORE_WRITE,
    ),
    "listInFlight": _GROUP,
    # transactions
    "sendHalfMessage": (*_TOPIC, *_MESSAGE, "INVALID_GROUP_NAME", "TRANSACTION_ID_IN_USE"),
    "getTransaction": ("TRANSACTION_NOT_FOUND",),
    "listTransactions": ("INVALID_GROUP_NAME", "INVALID_TOPIC_NAME"),
    "commitTransaction": (*_TRANSACTION_END, "TRANSACTION_END_UNREPLICATED"),
    "rollbackTransaction": (*_TRANSACTION_END, "TRANSACTION_END_UNREPLICATED"),
    "answerTransactionUnknown": _TRANSACTION_END,
    "pollTransactionChecks": ("INVALID_GROUP_NAME", "TOO_MANY_WAITERS"),
    # replication and health
    "getReplicaStatus": (),
    "getReplicationEpochs": (),
    "getReplicationConfigs": (),
    "healthz": (),
    "readyz": (),
    "metrics": (),
}
"""The codes each operation's own rules can answer, by operationId (the codes of its kind
are added by :func:`operation_codes`)."""

PROXY_CODES: Final[Mapping[str, tuple[str, ...]]] = {
    "sendMessages": ("OUTCOME_UNKNOWN",),
    "sendHalfMessage": ("OUTCOME_UNKNOWN",),
    "putTopic": ("ROUTE_CONFLICT", "ETCD_UNAVAILABLE", "ETCD_ERROR"),
}
"""The codes a proxy answers itself on an operation, by operationId, besides those of the
brokers' answers it passes on (the operation's own and of its kinds)."""

ROUTING: Final = ("METHOD_NOT_ALLOWED",)
"""A request with a method its path does not take (another operation's answer: the route
it reached is the path's)."""

ANY_OPERATION: Final = frozenset(
    (*AVAILABILITY, *BODY, *PARAMETERS, *AUTHENTICATED, *PERMITTED, *WRITE, *CLUSTER, *ROUTING)
)
"""The codes of every kind: what the error mapping allows any operation besides its own."""


def operation_codes(
    operation_id: str,
    *,
    parameters: bool,
    body: bool,
    authenticated: bool,
    permitted: bool,
    write: bool,
    proxied: bool = False,
) -> dict[int, list[str]]:
    """The codes an operation answers, by status, each list in the order written: its own
    (:data:`OPERATION_CODES`, and a proxy's :data:`PROXY_CODES` when ``proxied``), then those
    of its kinds."""
    codes: list[str] = list(OPERATION_CODES.get(operation_id, ()))
    if proxied:
        codes.extend(PROXY_CODES.get(operation_id, ()))
    kinds: list[tuple[bool, Iterable[str]]] = [
        (operation_id != "metrics", AVAILABILITY),
        (parameters or body, PARAMETERS),
        (body, BODY),
        (authenticated, AUTHENTICATED),
        (permitted, PERMITTED),
        (write, WRITE),
    ]
    for applies, kind in kinds:
        if applies:
            codes.extend(kind)
    by_status: dict[int, list[str]] = {}
    for code in dict.fromkeys(codes):
        by_status.setdefault(STATUS_BY_CODE[code], []).append(code)
    return dict(sorted(by_status.items()))


def declares(operation_id: str | None, status: int, code: str) -> bool:
    """Whether an answer of ``code`` with ``status`` is declared for the operation (any
    answer of an operation not in the table is: the proxy's own routes, the admin pages)."""
    own = OPERATION_CODES.get(operation_id or "")
    if own is None:
        return True
    return STATUS_BY_CODE.get(code) == status and (code in own or code in ANY_OPERATION)
