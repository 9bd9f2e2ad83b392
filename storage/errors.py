"""Errors raised by the storage engine.

The tree::

    StorageError
    ├── MessageRejectedError          the message is invalid; nothing was written
    │   ├── InvalidTopicError         topic breaks ``^[%|a-zA-Z0-9_-]+$`` or is longer than 127
    │   ├── MessageTooLargeError      body over max_message_size, or record over a file
    │   ├── PropertiesTooLargeError   encoded properties over 32767 bytes
    │   ├── QueueIdOutOfRangeError    queue id outside [0, max_queues_per_topic)
    │   ├── TimerMessageIllegalError  a delivery time that cannot be read, too far, or a
    │   │                             cancel marker in the past
    │   └── TimerNotEnabledError      timer messages are switched off
    ├── StoreNotWriteableError        a write error or stalled dispatch flagged the store
    │   ├── StoreDiskFullError        over the disk warning ratio, or no space left
    │   └── StoreFlushFailedError     an fsync failed: nothing more is acknowledged
    ├── StoreClosedError              the store was closed
    ├── StoreLockedError              another process holds the store directory
    ├── StoreLoadError                a store file has the wrong size or name
    ├── CorruptRecordError            impossible length, bad magic or CRC mismatch in the log
    └── ConfigFileError               a config file and its .bak are both unreadable

Each class carries a stable, HTTP-agnostic ``code``; the layers above map codes to
their own vocabulary in one place.
"""

from __future__ import annotations

from typing import ClassVar


class StorageError(Exception):
    """Base class of every storage error."""

    code: ClassVar[str] = "STORAGE_ERROR"


class MessageRejectedError(StorageError):
    """The message was refused before anything was written."""

    code: ClassVar[str] = "MESSAGE_ILLEGAL"


class InvalidTopicError(MessageRejectedError):
    """The topic name is empty, too long, or has characters outside the allowed set."""

    code: ClassVar[str] = "INVALID_TOPIC_NAME"


class MessageTooLargeError(MessageRejectedError):
    """The body is over the limit, or the record would not fit in one CommitLog file."""

    code: ClassVar[str] = "MESSAGE_TOO_LARGE"


class PropertiesTooLargeError(MessageRejectedError):
    """The encoded properties are longer than 32767 bytes."""

    code: ClassVar[str] = "PROPERTIES_TOO_LARGE"


class QueueIdOutOfRangeError(MessageRejectedError):
    """The queue id is negative or not below the store's per-topic queue limit."""

    code: ClassVar[str] = "QUEUE_NOT_FOUND"


class TimerMessageIllegalError(MessageRejectedError):
    """A timer message's time is unreadable or too far ahead, or a cancel marker's has
    passed (RocketMQ's ``WHEEL_TIMER_MSG_ILLEGAL``)."""

    code: ClassVar[str] = "TIMER_MESSAGE_ILLEGAL"


class TimerNotEnabledError(MessageRejectedError):
    """A message asks for a delivery time but the store runs without the timer wheel
    (RocketMQ's ``WHEEL_TIMER_NOT_ENABLE``)."""

    code: ClassVar[str] = "TIMER_NOT_ENABLED"


class StoreNotWriteableError(StorageError):
    """The store refuses writes (disk full, or a failed write); reads still work."""

    code: ClassVar[str] = "STORE_NOT_WRITEABLE"


class StoreDiskFullError(StoreNotWriteableError):
    """The disk holding the store is over its warning ratio, or a file found no space;
    writes resume by themselves once space is back."""

    code: ClassVar[str] = "DISK_FULL"


class StoreFlushFailedError(StoreNotWriteableError):
    """An fsync failed (EIO): the page cache can no longer be trusted, so nothing more is
    acknowledged; a restart recovers from what is on disk."""

    code: ClassVar[str] = "STORE_FLUSH_FAILED"


class StoreClosedError(StorageError):
    """The store has been closed."""

    code: ClassVar[str] = "STORE_CLOSED"


class StoreLockedError(StorageError):
    """Another process holds the lock on the store directory."""

    code: ClassVar[str] = "STORE_LOCKED"


class StoreLoadError(StorageError):
    """A store file cannot be loaded (wrong size, bad name)."""

    code: ClassVar[str] = "STORE_LOAD_FAILED"


class CorruptRecordError(StorageError):
    """A CommitLog record is impossible: bad magic, wrong length or CRC mismatch."""

    code: ClassVar[str] = "CORRUPT_RECORD"


class ConfigFileError(StorageError):
    """A config file and its backup are both unreadable."""

    code: ClassVar[str] = "CONFIG_FILE_UNREADABLE"
