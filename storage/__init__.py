"""spoolmq's storage engine: RocketMQ's CommitLog, ConsumeQueue and MappedFile design.

Synchronous and standard-library only. Start at :class:`MessageStore`.
"""

from storage.codec import Message, StoredMessage
from storage.errors import (
    ConfigFileError,
    CorruptRecordError,
    InvalidTopicError,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    QueueIdOutOfRangeError,
    StorageError,
    StoreClosedError,
    StoreLoadError,
    StoreLockedError,
    StoreNotWriteableError,
)
from storage.message_store import (
    FlushDiskType,
    GetMessageResult,
    GetMessageStatus,
    MessageStore,
    PutResult,
    PutStatus,
    StoreConfig,
    TagFilter,
)

__all__ = [
    "ConfigFileError",
    "CorruptRecordError",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "InvalidTopicError",
    "Message",
    "MessageRejectedError",
    "MessageStore",
    "MessageTooLargeError",
    "PropertiesTooLargeError",
    "PutResult",
    "PutStatus",
    "QueueIdOutOfRangeError",
    "StorageError",
    "StoreClosedError",
    "StoreConfig",
    "StoreLoadError",
    "StoreLockedError",
    "StoreNotWriteableError",
    "StoredMessage",
    "TagFilter",
]
