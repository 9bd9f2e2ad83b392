"""spoolmq's services: domain rules and async orchestration over :mod:`storage`.

Start at :class:`Broker`, the composition root. The names storage owns that the HTTP layer
needs (store config, statuses, stored messages, topic names, message properties) are
re-exported here: the HTTP layer imports :mod:`services`, never :mod:`storage`.
"""

from services.broker import Broker, BrokerState
from services.broker_config import BrokerConfig
from services.groups import MAX_GROUP_LENGTH, GroupPolicy
from services.ha import BROKER_NAME_PATTERN
from services.long_poll import WaiterRegistry, WakeReason
from services.messages import QueuePage
from services.metrics import Metrics
from services.offsets import OffsetCommit, QueueLag, TopicLag
from services.pull import GroupPull, PullOptions, QueueProgress, QueuePull
from services.send import OutgoingMessage, SendLimits, SendReceipt
from services.store_status import StoreGauges
from services.topics import SYSTEM_TOPICS, QueueStats, TopicPolicy
from storage import FlushDiskType, GetMessageStatus, StoreConfig, StoredMessage
from storage.config_managers import (
    CONSUME_FROM_EARLIEST,
    CONSUME_FROM_LATEST,
    PERM_READ,
    PERM_WRITE,
    SubscriptionGroupConfig,
    TopicConfig,
)
from storage.record.properties import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from storage.retention import RetentionConfig
from storage.timestamps import parse_timestamp_ms
from storage.topic_names import (
    DLQ_GROUP_TOPIC_PREFIX,
    MAX_TOPIC_LENGTH,
    RETRY_GROUP_TOPIC_PREFIX,
    TOPIC_NAME_PATTERN,
    dlq_topic,
    is_dlq_topic,
    is_group_topic,
    is_retry_topic,
    retry_topic,
)

__all__ = [
    "BROKER_NAME_PATTERN",
    "CONSUME_FROM_EARLIEST",
    "CONSUME_FROM_LATEST",
    "DLQ_GROUP_TOPIC_PREFIX",
    "MAX_GROUP_LENGTH",
    "MAX_TOPIC_LENGTH",
    "PERM_READ",
    "PERM_WRITE",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_RETRY_TOPIC",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SYSTEM_TOPICS",
    "TOPIC_NAME_PATTERN",
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
    "QueuePage",
    "QueueProgress",
    "QueuePull",
    "QueueStats",
    "RetentionConfig",
    "SendLimits",
    "SendReceipt",
    "StoreConfig",
    "StoreGauges",
    "StoredMessage",
    "SubscriptionGroupConfig",
    "TopicConfig",
    "TopicLag",
    "TopicPolicy",
    "WaiterRegistry",
    "WakeReason",
    "dlq_topic",
    "is_dlq_topic",
    "is_group_topic",
    "is_retry_topic",
    "parse_timestamp_ms",
    "retry_topic",
]
