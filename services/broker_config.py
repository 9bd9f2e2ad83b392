"""What a broker is configured with: its store, its topic, group and send rules, its long-poll
bounds, and (from :class:`~services.ha.role.ReplicaConfig`) how it replicates."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from services.groups import GroupPolicy
from services.ha.role import ReplicaConfig
from services.idempotency import DEFAULT_WINDOW_S
from services.send import SendLimits
from services.topics import TopicPolicy
from services.transaction.service import TransactionConfig
from storage import StoreConfig


@dataclass(frozen=True, slots=True)
class BrokerConfig(ReplicaConfig):
    """Everything the broker needs, passed in by the app (which reads settings).

    The replication settings (role, master, HA port, ...) are :class:`ReplicaConfig`'s,
    given by keyword.
    """

    store_dir: Path
    store: StoreConfig = field(default_factory=StoreConfig)
    topics: TopicPolicy = field(default_factory=TopicPolicy)
    groups: GroupPolicy = field(default_factory=GroupPolicy)
    send: SendLimits = field(default_factory=SendLimits)
    max_parked_pulls: int = 10_000  # beyond this a pull that would park is refused
    max_wait_ms: int = 30_000  # longer long-polls are cut to this
    retry_after_s: int = 1  # what a refused pull is told
    offset_persist_interval_s: float = 5.0
    dedup_window_s: float = DEFAULT_WINDOW_S  # how long an idempotency key is remembered
    transactions: TransactionConfig = field(default_factory=TransactionConfig)
    trace: bool = False  # message trace for topics whose config does not say
    trace_sample_rate: float = 1.0  # share of the messages of traced topics that are traced
    broker_group: str | None = None  # its group in a cluster (default: the broker name)

    @property
    def group(self) -> str:
        """The broker group this broker serves: what timer cancel handles name."""
        return self.broker_group or self.broker_name
