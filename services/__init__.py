"""spoolmq's services: domain rules and async orchestration over :mod:`storage`.

Start at :class:`Broker`, the composition root. The names storage owns that the HTTP layer
needs (store config, statuses, stored messages) are re-exported here.
"""

from services.broker import Broker, BrokerConfig, BrokerState
from services.groups import GroupPolicy
from services.long_poll import WaiterRegistry, WakeReason
from services.metrics import Metrics
from services.offsets import OffsetCommit, QueueLag, TopicLag
from services.pull import GroupPull, PullOptions, QueueProgress, QueuePull
from services.send import OutgoingMessage, SendLimits, SendReceipt
from services.topics import SYSTEM_TOPICS, QueueStats, TopicPolicy
from storage import FlushDiskType, GetMessageStatus, StoreConfig, StoredMessage
from storage.codec import encode_msg_id
from storage.config_managers import (
    CONSUME_FROM_EARLIEST,
    CONSUME_FROM_LATEST,
    PERM_READ,
    PERM_WRITE,
    SubscriptionGroupConfig,
    TopicConfig,
)
from storage.retention import RetentionConfig

__all__ = [
    "CONSUME_FROM_EARLIEST",
    "CONSUME_FROM_LATEST",
    "PERM_READ",
    "PERM_WRITE",
    "SYSTEM_TOPICS",
    "Broker",
    "BrokerConfig",
    "BrokerState",
    "FlushDiskType",
    "GetMessageStatus",
    "GroupPolicy",
    "GroupPull",
    "Metrics",
    "OffsetCommit",
    "OutgoingMessage",
    "PullOptions",
    "QueueLag",
    "QueueProgress",
    "QueuePull",
    "QueueStats",
    "RetentionConfig",
    "SendLimits",
    "SendReceipt",
    "StoreConfig",
    "StoredMessage",
    "SubscriptionGroupConfig",
    "TopicConfig",
    "TopicLag",
    "TopicPolicy",
    "WaiterRegistry",
    "WakeReason",
    "encode_msg_id",
]
