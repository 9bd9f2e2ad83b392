"""spoolmq's services: domain rules and async orchestration over :mod:`storage`.

Start at :class:`Broker`, the composition root. The HTTP layer reaches the services through
four faces, and nothing deeper (an import-linter contract says so):

- :mod:`services` (this module): the broker, its config, and the values and rules of
  sending, pulling, offsets, topics and groups, send-back, resets, the DLQ and redrive jobs,
  POP receive and ack, idempotency keys, transactional messages; and the names storage owns
  that configure a broker or name its topics (store config, topic and group configs, topic
  names, properties);
- :mod:`services.errors`: the error tree;
- :mod:`services.ha`: the replica role (``broker.replica``), its config and status;
- :mod:`services.cluster`: cluster membership, the route table and the proxy's routing.

The message values every layer shares (``StoredMessage``, ``GetMessageStatus``, ...) are
storage's bottom module :mod:`storage.record.message`, which the HTTP layer imports itself.
"""

from services.broker import Broker, BrokerState
from services.broker_config import BrokerConfig
from services.consumer_filter import MAX_FILTER_CHARS, compiled_filter
from services.dlq import (
    MAX_REDRIVE,
    MAX_REDRIVE_RATE,
    MIN_REDRIVE_RATE,
    PROPERTY_REDRIVEN_FROM,
    REDRIVE_PROMPT_S,
    DlqFilter,
    DlqPage,
    DlqState,
    RedriveOutcome,
    RedriveReport,
    RedriveRequest,
    RedriveStatus,
)
from services.groups import MAX_GROUP_LENGTH, GroupPolicy, check_group_name
from services.ha import BROKER_NAME_PATTERN
from services.idempotency import KEY_PATTERN, MAX_KEY_LENGTH, check_key
from services.long_poll import WaiterRegistry, WakeReason
from services.messages import QueuePage
from services.metrics import Histogram, Metrics
from services.offset_reset import ResetPlan, ResetRequest, ResetTarget
from services.offsets import OffsetCommit, QueueLag, TopicLag
from services.outgoing import RESERVED_PROPERTIES, OutgoingMessage
from services.pop.handles import MAX_HANDLE_LENGTH
from services.pop.service import (
    DEFAULT_INVISIBLE_MS,
    MAX_INVISIBLE_MS,
    MAX_RECEIVE_MESSAGES,
    MIN_INVISIBLE_MS,
    AckResult,
    InvisibilityChange,
    Received,
    ReceiveOptions,
)
from services.pop.views import (
    InFlightKey,
    InFlightPage,
    InFlightView,
    QueueView,
    in_flight_by_queue,
    in_flight_page,
    queue_views,
)
from services.pull import GroupPull, PullOptions, QueueProgress, QueuePull
from services.redrive_jobs import (
    MAX_ACTIVE_REDRIVE_JOBS,
    MAX_KEPT_REDRIVE_JOBS,
    RedriveJob,
    RedriveJobState,
)
from services.schedule import LevelProgress
from services.send import SendLimits, SendReceipt
from services.send_back import SendBackRequest, SendBackResult, original_topic
from services.send_receipts import Sent
from services.store_status import StoreGauges
from services.timer.recall import CancelOutcome, CancelResult
from services.timer.service import TimerProgress
from services.timer.upcoming import TIMER_BUCKETS, UpcomingTimer, UpcomingTimers
from services.tls import TlsConfig, TlsConfigError
from services.topics import SYSTEM_TOPICS, QueueSeek, QueueStats, TopicPolicy
from services.trace.events import Consumer, TraceEvent
from services.trace.lookup import GroupState, Timeline
from services.trace.tracer import CURRENT_CONSUMER
from services.transaction import (
    CheckOffer,
    Ended,
    Prepared,
    Transaction,
    TransactionConfig,
    TransactionService,
    TransactionState,
)
from storage import FlushDiskType, StoreConfig
from storage.config_managers import (
    CONSUME_FROM_EARLIEST,
    CONSUME_FROM_LATEST,
    PERM_READ,
    PERM_WRITE,
    SubscriptionGroupConfig,
    TopicConfig,
)
from storage.durations import format_duration, format_millis
from storage.lag_model import DlqDepth
from storage.record.properties import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC
from storage.retention import RetentionConfig
from storage.timer.config import PRECISIONS_MS, TimerConfig, check_timer_config
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
    "CURRENT_CONSUMER",
    "DEFAULT_INVISIBLE_MS",
    "DLQ_GROUP_TOPIC_PREFIX",
    "KEY_PATTERN",
    "MAX_ACTIVE_REDRIVE_JOBS",
    "MAX_FILTER_CHARS",
    "MAX_GROUP_LENGTH",
    "MAX_HANDLE_LENGTH",
    "MAX_INVISIBLE_MS",
    "MAX_KEPT_REDRIVE_JOBS",
    "MAX_KEY_LENGTH",
    "MAX_RECEIVE_MESSAGES",
    "MAX_REDRIVE",
    "MAX_REDRIVE_RATE",
    "MAX_TOPIC_LENGTH",
    "MIN_INVISIBLE_MS",
    "MIN_REDRIVE_RATE",
    "PERM_READ",
    "PERM_WRITE",
    "PRECISIONS_MS",
    "PROPERTY_ORIGIN_MESSAGE_ID",
    "PROPERTY_REDRIVEN_FROM",
    "PROPERTY_RETRY_TOPIC",
    "REDRIVE_PROMPT_S",
    "RESERVED_PROPERTIES",
    "RETRY_GROUP_TOPIC_PREFIX",
    "SYSTEM_TOPICS",
    "TIMER_BUCKETS",
    "TOPIC_NAME_PATTERN",
    "AckResult",
    "Broker",
    "BrokerConfig",
    "BrokerState",
    "CancelOutcome",
    "CancelResult",
    "CheckOffer",
    "Consumer",
    "DlqDepth",
    "DlqFilter",
    "DlqPage",
    "DlqState",
    "Ended",
    "FlushDiskType",
    "GroupPolicy",
    "GroupPull",
    "GroupState",
    "Histogram",
    "InFlightKey",
    "InFlightPage",
    "InFlightView",
    "InvisibilityChange",
    "LevelProgress",
    "Metrics",
    "OffsetCommit",
    "OutgoingMessage",
    "Prepared",
    "PullOptions",
    "QueueLag",
    "QueuePage",
    "QueueProgress",
    "QueuePull",
    "QueueSeek",
    "QueueStats",
    "QueueView",
    "ReceiveOptions",
    "Received",
    "RedriveJob",
    "RedriveJobState",
    "RedriveOutcome",
    "RedriveReport",
    "RedriveRequest",
    "RedriveStatus",
    "ResetPlan",
    "ResetRequest",
    "ResetTarget",
    "RetentionConfig",
    "SendBackRequest",
    "SendBackResult",
    "SendLimits",
    "SendReceipt",
    "Sent",
    "StoreConfig",
    "StoreGauges",
    "SubscriptionGroupConfig",
    "Timeline",
    "TimerConfig",
    "TimerProgress",
    "TlsConfig",
    "TlsConfigError",
    "TopicConfig",
    "TopicLag",
    "TopicPolicy",
    "TraceEvent",
    "Transaction",
    "TransactionConfig",
    "TransactionService",
    "TransactionState",
    "UpcomingTimer",
    "UpcomingTimers",
    "WaiterRegistry",
    "WakeReason",
    "check_group_name",
    "check_key",
    "check_timer_config",
    "compiled_filter",
    "dlq_topic",
    "format_duration",
    "format_millis",
    "in_flight_by_queue",
    "in_flight_page",
    "is_dlq_topic",
    "is_group_topic",
    "is_retry_topic",
    "original_topic",
    "parse_timestamp_ms",
    "queue_views",
    "retry_topic",
]
