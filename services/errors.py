"""Errors raised by the services layer.

The tree::

    ServiceError
    ├── NotFoundError
    │   ├── TopicNotFoundError          the topic has no config (and auto-creation is off)
    │   ├── GroupNotFoundError          the consumer group has no config and no offsets
    │   ├── QueueNotFoundError          the queue id is outside the topic's queue count
    │   ├── MessageNotFoundError        no message has this id (or it has expired)
    │   ├── TransactionNotFoundError    no half message has this transaction id
    │   ├── RedriveJobNotFoundError     no redrive job of the group has this id
    │   └── TimerNotFoundError          no timer message of the topic has this handle
    ├── InvalidRequestError
    │   ├── InvalidGroupNameError       group name breaks ``^[%|a-zA-Z0-9_-]+$`` or is too long
    │   ├── InvalidMessageIdError       a message id is not 32 or 56 hex characters
    │   ├── InvalidOffsetError          an offset outside what the queue can hold
    │   ├── InvalidPropertyError        a reserved or malformed message property, tag or key
    │   ├── InvalidTopicConfigError     queue counts or perm outside what the store allows
    │   ├── BatchRejectedError          a batch is empty, too long, too big or spans queues
    │   ├── InvalidIdempotencyKeyError  an Idempotency-Key that is empty, too long or not ASCII
    │   ├── IdempotencyKeyReusedError   a key already used (in the window) for another payload
    │   ├── InvalidReceiptHandleError   a POP receipt handle not issued here, mangled or replaced
    │   ├── InvalidTimerHandleError     a timer cancel handle that is mangled or of another
    │   │                               topic or broker
    │   ├── InvalidFilterError          a SQL92 filter that does not parse (where, and what was
    │   │                               expected there)
    │   └── RedriveTooLongError         a paced redrive too long for one call: use a job
    ├── ForbiddenError
    │   ├── SystemTopicError            system, retry and DLQ topics are not sent to directly
    │   ├── TopicNotWriteableError      the topic's perm has no write bit
    │   ├── TopicNotReadableError       the topic's perm has no read bit
    │   ├── ConsumeDisabledError        the group's consume_enable is false
    │   └── ProducerGroupMismatchError  a transaction ended by another producer group
    ├── ConsumeModeConflictError        a group consumes by offsets or by POP, never both
    ├── TimerAlreadyDeliveredError      a cancel came after the timer message was delivered
    ├── ReceiptHandleExpiredError       a POP handle whose invisibility ran out
    ├── TransactionEndedError           a commit after a rollback, or the reverse
    ├── TransactionEndUnreplicatedError an end no broker that could succeed this master has yet
    ├── TransactionIdInUseError         a half message whose UNIQ_KEY is a known transaction
    ├── TooManyRedriveJobsError         the cap on queued and running redrive jobs is reached
    ├── TooManyWaitersError             the cap on parked long-polls is reached; retry later
    ├── BrokerUnavailableError          the broker is starting, stopping or failed
    │   └── KeyIndexCatchingUpError     the key index is still being rebuilt; retry later
    ├── IdempotencyUnavailableError     the broker runs without the index keys are found in
    ├── NotMasterError                  a write reached a slave; it names the master
    │   └── NoMasterError               the group has no master to name (an election is on)
    ├── ReplicaDivergedError            this replica's log has a tail its master never confirmed
    ├── ReplicaRoleError                a role change this replica cannot make in its role
    ├── EtcdUnavailableError            no etcd endpoint answered
    ├── EtcdError                       etcd answered with an error
    ├── ClusterJoinError                the broker could not take its place in its cluster
    └── MasterRoleLostError             another broker was elected in this master's place

The proxy's routing errors (:mod:`services.cluster.proxy_routing`) subclass this tree and
carry its codes.

Each class carries a stable ``code`` (the same vocabulary as :mod:`storage.errors`); the
HTTP layer maps codes to statuses in one place. Services never know a status code.
:class:`~storage.errors.StorageError`, the root of the store's errors (an invalid topic name,
a message too large, a store that refuses writes), passes through the services unchanged and
is re-exported here so that the HTTP layer need not import :mod:`storage`.
"""

from __future__ import annotations

from typing import ClassVar

from storage.errors import StorageError as StorageError


class ServiceError(Exception):
    """Base class of every services error."""

    code: ClassVar[str] = "SERVICE_ERROR"


class NotFoundError(ServiceError):
    """Something the request names does not exist."""

    code: ClassVar[str] = "NOT_FOUND"


class TopicNotFoundError(NotFoundError):
    """The topic has no config."""

    code: ClassVar[str] = "TOPIC_NOT_FOUND"


class GroupNotFoundError(NotFoundError):
    """The consumer group has no config and no committed offsets."""

    code: ClassVar[str] = "GROUP_NOT_FOUND"


class QueueNotFoundError(NotFoundError):
    """The queue id is not below the topic's read (or write) queue count."""

    code: ClassVar[str] = "QUEUE_NOT_FOUND"


class MessageNotFoundError(NotFoundError):
    """No message has this id, or its CommitLog file is gone."""

    code: ClassVar[str] = "MESSAGE_NOT_FOUND"


class InvalidRequestError(ServiceError):
    """The request is well-formed but breaks a domain rule."""

    code: ClassVar[str] = "INVALID_REQUEST"


class InvalidGroupNameError(InvalidRequestError):
    """The group name is empty, too long or has characters outside the allowed set."""

    code: ClassVar[str] = "INVALID_GROUP_NAME"


class InvalidMessageIdError(InvalidRequestError):
    """A message id must be 32 (IPv4 broker) or 56 (IPv6 broker) hex characters."""

    code: ClassVar[str] = "INVALID_MESSAGE_ID"


class InvalidOffsetError(InvalidRequestError):
    """An offset is negative or beyond the queue's max offset."""

    code: ClassVar[str] = "INVALID_OFFSET"


class InvalidPropertyError(InvalidRequestError):
    """A property name is reserved, or a property, tag or key has a forbidden character."""

    code: ClassVar[str] = "INVALID_PROPERTY"


class InvalidTopicConfigError(InvalidRequestError):
    """Queue counts or perm bits outside what the store allows."""

    code: ClassVar[str] = "INVALID_TOPIC_CONFIG"


class BatchRejectedError(InvalidRequestError):
    """A batch is empty, over the count or byte limit, or its messages name different queues."""

    code: ClassVar[str] = "BATCH_REJECTED"


class InvalidIdempotencyKeyError(InvalidRequestError):
    """An idempotency key is empty, longer than 128 characters, or not printable ASCII."""

    code: ClassVar[str] = "INVALID_IDEMPOTENCY_KEY"


class IdempotencyKeyReusedError(InvalidRequestError):
    """The idempotency key was used, inside the window, for a send with another payload."""

    code: ClassVar[str] = "IDEMPOTENCY_KEY_REUSED"


class TransactionNotFoundError(NotFoundError):
    """No half message of this broker has the transaction id (or it has expired)."""

    code: ClassVar[str] = "TRANSACTION_NOT_FOUND"


class ForbiddenError(ServiceError):
    """The operation is not allowed on this resource."""

    code: ClassVar[str] = "FORBIDDEN"


class SystemTopicError(ForbiddenError):
    """System topics (``SCHEDULE_TOPIC_XXXX``) and a group's ``%RETRY%``/``%DLQ%`` topics are
    written by the broker only."""

    code: ClassVar[str] = "SYSTEM_TOPIC"


class TopicNotWriteableError(ForbiddenError):
    """The topic's perm has no write bit."""

    code: ClassVar[str] = "TOPIC_NOT_WRITEABLE"


class TopicNotReadableError(ForbiddenError):
    """The topic's perm has no read bit."""

    code: ClassVar[str] = "TOPIC_NOT_READABLE"


class ConsumeDisabledError(ForbiddenError):
    """The group's ``consume_enable`` is false."""

    code: ClassVar[str] = "CONSUME_DISABLED"


class ProducerGroupMismatchError(ForbiddenError):
    """A transaction is ended (or its checks polled) only by the producer group that sent
    its half message (``checkPrepareMessage``)."""

    code: ClassVar[str] = "PRODUCER_GROUP_MISMATCH"


class TransactionEndedError(ServiceError):
    """The transaction already ended the other way: a commit after a rollback, or a
    rollback after a commit."""

    code: ClassVar[str] = "TRANSACTION_ALREADY_ENDED"


class TransactionEndUnreplicatedError(ServiceError):
    """An end stored on this master, whose op record no broker that could succeed it has yet
    (sync replication, its in-sync slaves out of reach): not decided. The same end, retried,
    is answered once a replica has it; the other way is refused here."""

    code: ClassVar[str] = "TRANSACTION_END_UNREPLICATED"

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class TransactionIdInUseError(ServiceError):
    """A transactional send whose ``UNIQ_KEY`` (its transaction id) is already a transaction
    of this broker."""

    code: ClassVar[str] = "TRANSACTION_ID_IN_USE"


class TooManyWaitersError(ServiceError):
    """The number of parked long-polls is at its cap; the client should retry later."""

    code: ClassVar[str] = "TOO_MANY_WAITERS"

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class BrokerUnavailableError(ServiceError):
    """The broker is not running: still starting, stopping, or failed to start."""

    code: ClassVar[str] = "BROKER_UNAVAILABLE"

    def __init__(self, message: str, retry_after_s: int = 1) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class KeyIndexCatchingUpError(BrokerUnavailableError):
    """After an unclean exit (or on a promoted slave) the key index does not cover the log
    yet: a keyed send cannot tell a retry from a new send until it does."""

    code: ClassVar[str] = "KEY_INDEX_CATCHING_UP"


class IdempotencyUnavailableError(ServiceError):
    """The broker runs without the message index (``message_index_enable`` off), where
    idempotency keys are found: it cannot take keyed sends."""

    code: ClassVar[str] = "IDEMPOTENCY_UNAVAILABLE"


class NotMasterError(ServiceError):
    """A write reached a read-only slave; ``master`` is the master's HTTP address."""

    code: ClassVar[str] = "NOT_MASTER"

    def __init__(self, message: str, master: str | None) -> None:
        super().__init__(message)
        self.master = master


class ReplicaDivergedError(ServiceError):
    """This replica's CommitLog has a tail the master's epochs do not confirm."""

    code: ClassVar[str] = "REPLICA_DIVERGED"


class ReplicaRoleError(ServiceError):
    """A role change asked of a replica in the wrong role (a master told to follow)."""

    code: ClassVar[str] = "REPLICA_ROLE_CONFLICT"


class NoMasterError(NotMasterError):
    """A write while the group has no master this broker can name (a failover in progress,
    or this broker lost the master role): retry shortly."""

    code: ClassVar[str] = "NO_MASTER"

    def __init__(self, message: str, master: str | None = None, retry_after_s: int = 1) -> None:
        super().__init__(message, master)
        self.retry_after_s = retry_after_s


class ConsumeModeConflictError(ServiceError):
    """The group consumes by offsets and was asked to receive, or the other way round."""

    code: ClassVar[str] = "CONSUME_MODE_CONFLICT"


class TimerAlreadyDeliveredError(ServiceError):
    """The timer message to cancel has been delivered already (its slot has fired)."""

    code: ClassVar[str] = "TIMER_ALREADY_DELIVERED"


class TimerNotFoundError(NotFoundError):
    """No timer message of the topic has this handle (or its record has expired)."""

    code: ClassVar[str] = "TIMER_NOT_FOUND"


class InvalidFilterError(InvalidRequestError):
    """A SQL92 property filter that is not one: the position and what was expected there."""

    code: ClassVar[str] = "INVALID_FILTER"


class InvalidTimerHandleError(InvalidRequestError):
    """A timer cancel handle that cannot be read, or names another topic or broker."""

    code: ClassVar[str] = "INVALID_TIMER_HANDLE"


class InvalidReceiptHandleError(InvalidRequestError):
    """A receipt handle that this store did not issue, was mangled, or was replaced."""

    code: ClassVar[str] = "INVALID_RECEIPT_HANDLE"


class ReceiptHandleExpiredError(ServiceError):
    """The handle's invisibility ran out: the message may already be with someone else."""

    code: ClassVar[str] = "RECEIPT_HANDLE_EXPIRED"


class RedriveTooLongError(InvalidRequestError):
    """A paced redrive would hold its request open too long: run it as a redrive job."""

    code: ClassVar[str] = "REDRIVE_TOO_LONG"


class RedriveJobNotFoundError(NotFoundError):
    """No redrive job of this group has this id (deleted, or forgotten: only the newest are
    kept)."""

    code: ClassVar[str] = "REDRIVE_JOB_NOT_FOUND"


class TooManyRedriveJobsError(ServiceError):
    """As many redrive jobs as allowed are queued or running; cancel one or wait."""

    code: ClassVar[str] = "TOO_MANY_REDRIVE_JOBS"


class EtcdUnavailableError(ServiceError):
    """No etcd endpoint answered (down, partitioned, or without a quorum)."""

    code: ClassVar[str] = "ETCD_UNAVAILABLE"


class EtcdError(ServiceError):
    """etcd answered with an error (a bad request, an unknown lease, ...)."""

    code: ClassVar[str] = "ETCD_ERROR"


class ClusterJoinError(ServiceError):
    """The broker could not take its place in the cluster (etcd unreachable, no master)."""

    code: ClassVar[str] = "CLUSTER_JOIN_FAILED"


class MasterRoleLostError(ServiceError):
    """This master found another broker elected in its place: it must restart as a slave."""

    code: ClassVar[str] = "MASTER_ROLE_LOST"
