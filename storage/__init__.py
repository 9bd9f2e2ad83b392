"""spoolmq's storage engine: RocketMQ's CommitLog, ConsumeQueue and MappedFile design.

Synchronous and standard-library only. Start at :class:`MessageStore` (``message_store``),
the facade; the message values every layer shares are in ``record.message``, the store's
own value types in ``store_types``, the tag subscription in ``tag_filter``.
"""

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
    StoreDiskFullError,
    StoreFlushFailedError,
    StoreLoadError,
    StoreLockedError,
    StoreNotWriteableError,
)
from storage.message_store import MessageStore
from storage.record.message import (
    Appended,
    GetMessageStatus,
    Message,
    PutResult,
    PutStatus,
    StoredMessage,
    UniformMessages,
)
from storage.store_types import FlushDiskType, GetMessageResult, StoreConfig
from storage.tag_filter import TagFilter

__all__ = [
    "Appended",
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
    "StoreDiskFullError",
    "StoreFlushFailedError",
    "StoreLoadError",
    "StoreLockedError",
    "StoreNotWriteableError",
    "StoredMessage",
    "TagFilter",
    "UniformMessages",
]
