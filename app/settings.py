"""Settings: the only module that reads the environment (``SPOOLMQ_*`` variables).

Precedence: defaults, then environment variables, then explicit values (CLI flags, tests).
Every store size and limit of :class:`storage.StoreConfig` has a field of the same name.
"""

from __future__ import annotations

import dataclasses
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services import (
    BROKER_NAME_PATTERN,
    BrokerConfig,
    FlushDiskType,
    GroupPolicy,
    RetentionConfig,
    SendLimits,
    StoreConfig,
    TimerConfig,
    TlsConfig,
    TopicPolicy,
    TransactionConfig,
    check_timer_config,
)
from services.cluster import ClusterConfig
from services.ha import MasterAddress, split_host_port

MIB = 1024 * 1024
MAX_WAIT_MS = 30_000
"""Longest long-poll a pull may ask for (documented in the OpenAPI schema)."""
MAX_PULL_MESSAGES = 1024
MAX_REQUEST_BYTES = 4 * MIB
"""Default cap on a request body; larger requests are refused before they are read."""
MAX_PULL_BYTES = 64 * MIB
"""Largest max_bytes a pull may ask for (documented in the OpenAPI schema)."""


SETTING_SECTIONS: Final = {
    "store_dir": "server",
    "commit_log_file_size": "store sizes and limits",
    "auto_create_topics": "broker",
    "role": "replication",
    "cluster": "cluster",
    "max_request_bytes": "HTTP limits",
    "auth_file": "security",
}
"""The first setting of each section of :class:`Settings` (in declaration order), and its
title: ``spoolmq serve --help`` lists the flags by section."""


class Settings(BaseSettings):
    """Server, store and API limits. Each field is also ``SPOOLMQ_<FIELD>`` and ``--field``."""

    model_config = SettingsConfigDict(env_prefix="SPOOLMQ_", extra="ignore", frozen=True)

    # ---------------------------------------------------------------- server
    store_dir: Path = Field(
        default=Path("./data"), description="store directory (created if missing)"
    )
    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(
        default=8080, ge=0, le=65535, description="port to listen on (0: any free port)"
    )
    grpc_listen: str | None = Field(
        default=None,
        description="HOST:PORT of RocketMQ 5's gRPC face (the official clients; needs the "
        "grpc extra; port 0: any; off when not given)",
    )
    flush: Literal["async", "sync"] = Field(
        default="async",
        description="ASYNC_FLUSH acks after the page-cache write, SYNC_FLUSH after fsync",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        default="info", description="log level"
    )
    access_log: bool = Field(default=False, description="log every request")
    graceful_shutdown_s: float = Field(
        default=10.0, gt=0, description="how long shutdown waits for requests in flight"
    )

    # ---------------------------------------------------------------- store sizes and limits
    commit_log_file_size: int = Field(
        default=1024 * MIB, ge=64 * 1024, description="bytes per CommitLog file"
    )
    consume_queue_units_per_file: int = Field(
        default=300_000, ge=16, description="20-byte units per ConsumeQueue file"
    )
    max_message_size: int = Field(
        default=4 * MIB, ge=1, description="largest message body in bytes"
    )
    max_queues_per_topic: int = Field(
        default=1024, ge=1, description="highest queue count of a topic"
    )
    check_crc_on_recover: bool = Field(default=True, description="check body CRCs during recovery")
    max_transfer_bytes_in_memory: int = Field(
        default=256 * 1024, ge=1, description="pull byte cap for messages in memory"
    )
    max_transfer_bytes_in_disk: int = Field(
        default=64 * 1024, ge=1, description="pull byte cap for messages only on disk"
    )
    max_transfer_count_in_memory: int = Field(
        default=32, ge=1, description="pull count cap for messages in memory"
    )
    max_transfer_count_in_disk: int = Field(
        default=8, ge=1, description="pull count cap for messages only on disk"
    )
    access_message_in_memory_max_ratio: int = Field(
        default=40,
        ge=1,
        le=100,
        description="percent of RAM counted as 'in memory' behind the log end",
    )
    sync_flush_timeout_ms: int = Field(
        default=5000, ge=1, description="SYNC_FLUSH: how long a send waits for its fsync"
    )
    flush_interval_commit_log_ms: int = Field(
        default=500, ge=1, description="ASYNC_FLUSH: ms between CommitLog flushes"
    )
    flush_commit_log_least_pages: int = Field(
        default=4, ge=0, description="dirty 4 KiB pages before a CommitLog flush"
    )
    flush_commit_log_thorough_interval_ms: int = Field(
        default=10_000, ge=1, description="ms after which the CommitLog is flushed regardless"
    )
    flush_interval_consume_queue_ms: int = Field(
        default=1000, ge=1, description="ms between ConsumeQueue flushes"
    )
    flush_consume_queue_least_pages: int = Field(
        default=2, ge=0, description="dirty pages before a ConsumeQueue flush"
    )
    flush_consume_queue_thorough_interval_ms: int = Field(
        default=60_000, ge=1, description="ms after which ConsumeQueues are flushed regardless"
    )
    clean_resource_interval_ms: int = Field(
        default=10_000, ge=1, description="ms between expired-file clean-ups"
    )
    clean_first_delay_ms: int = Field(
        default=60_000, ge=0, description="ms before the first clean-up"
    )
    file_reserved_time_hours: float = Field(
        default=72, gt=0, description="hours a CommitLog file is kept"
    )
    delete_when: str = Field(
        default="04", description="hours of the day (e.g. 04;16) when expired files are deleted"
    )
    disk_max_used_space_ratio: int = Field(
        default=75, ge=10, le=95, description="disk use percent that triggers deleting files"
    )
    disk_space_clean_forcibly_ratio: int = Field(
        default=85, ge=10, le=100, description="disk use percent that forces deletion"
    )
    disk_space_warning_level_ratio: int = Field(
        default=90, ge=10, le=100, description="disk use percent that stops writes"
    )
    clean_file_forcibly_enable: bool = Field(
        default=True, description="delete unexpired files when the disk is nearly full"
    )
    disk_check_interval_ms: int = Field(
        default=200, ge=10, description="ms between samples of the store's disk use"
    )
    message_index_enable: bool = Field(
        default=True, description="index message keys and ids (IndexFile)"
    )
    max_hash_slot_num: int = Field(default=500_000, ge=1, description="IndexFile hash slots")
    max_index_num: int = Field(default=2_000_000, ge=1, description="IndexFile entries per file")
    index_catch_up_on_open: bool = Field(
        default=True, description="rebuild the index before serving after an unclean exit"
    )
    message_delay_levels: str = Field(
        default="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        description="delay level table",
    )
    timer_enabled: bool = Field(default=True, description="accept timer messages (deliver_at)")
    timer_precision_ms: int = Field(
        default=1000,
        description="timer wheel slot length, 100, 200, 500 or 1000: how exactly timer "
        "messages fire",
    )
    timer_max_delay_s: int = Field(
        default=259_200, ge=1, description="how far ahead a timer message may be (3 days)"
    )

    # ---------------------------------------------------------------- broker
    auto_create_topics: bool = Field(
        default=True, description="a send to an unknown topic creates it"
    )
    auto_create_groups: bool = Field(
        default=True, description="a pull by an unknown group creates it"
    )
    default_topic_queue_nums: int = Field(
        default=8, ge=1, description="queues of an auto-created topic"
    )
    max_parked_pulls: int = Field(
        default=10_000, ge=0, description="parked long-polls before pulls get 429"
    )
    long_poll_max_ms: int = Field(
        default=MAX_WAIT_MS,
        ge=0,
        le=MAX_WAIT_MS,
        description="longest long-poll the server grants (longer wait_ms are cut to it)",
    )
    offset_persist_interval_s: float = Field(
        default=5.0, gt=0, description="seconds between consumerOffset.json writes"
    )
    dedup_window_s: int = Field(
        default=300,
        ge=1,
        description="seconds (by store time) a send's Idempotency-Key is remembered: a repeat "
        "inside the window gets the first receipt",
    )
    transaction_timeout_ms: int = Field(
        default=6_000,
        ge=1,
        description="an open transaction is first checked back this long after its half send "
        "(RocketMQ's transactionTimeOut)",
    )
    transaction_check_interval_ms: int = Field(
        default=30_000,
        ge=1,
        description="then it is checked again every this many ms (transactionCheckInterval)",
    )
    transaction_check_max: int = Field(
        default=15,
        ge=1,
        description="after this many checks the half goes to TRANS_CHECK_MAX_TIME_TOPIC "
        "(transactionCheckMax)",
    )
    transaction_op_msg_max_size: int = Field(
        default=4096,
        ge=64,
        le=1024 * 1024,
        description="bytes of half offsets one op record holds at most (transactionOpMsgMaxSize)",
    )
    trace: bool = Field(
        default=False,
        description="message trace for topics whose config does not say (a topic's trace "
        "true/false wins): each step of a message written to RMQ_SYS_TRACE_TOPIC",
    )
    trace_sample_rate: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="share of the messages of traced topics that are traced (by a hash of "
        "the message id: a message is traced whole or not at all)",
    )

    # ---------------------------------------------------------------- replication
    role: Literal["master", "slave"] = Field(
        default="master", description="master takes writes; a slave replicates and serves reads"
    )
    replication: Literal["async", "sync"] = Field(
        default="async",
        description="async answers a send after the master's flush; sync once the in-sync "
        "slaves have it",
    )
    broker_name: str = Field(
        default="broker-a",
        pattern=BROKER_NAME_PATTERN,
        max_length=64,
        description="this replica's name (a master lists its slaves by it)",
    )
    ha_listen: str | None = Field(
        default=None, description="HOST:PORT a master streams its CommitLog on (port 0: any)"
    )
    master_http: str | None = Field(default=None, description="a slave's master: its HTTP base URL")
    master_ha: str | None = Field(default=None, description="a slave's master: its HA HOST:PORT")
    master_name: str | None = Field(
        default=None, description="a slave's master: its broker name (default: its HA address)"
    )
    ha_max_gap_bytes: int = Field(
        default=256 * MIB, ge=1, description="a slave farther behind is not in sync"
    )
    ha_catch_up_window_s: float = Field(
        default=15.0, gt=0, description="a slave not caught up for longer is not in sync"
    )
    ha_heartbeat_s: float = Field(
        default=1.0, gt=0, description="seconds between HA heartbeats and slave reports"
    )
    min_in_sync_replicas: int = Field(
        default=1,
        ge=1,
        le=16,
        description="a master with fewer replicas in sync (itself included) refuses writes "
        "with 503 NOT_ENOUGH_IN_SYNC_REPLICAS; above 1 needs sync replication",
    )
    config_sync_interval_s: float = Field(
        default=2.0, gt=0, description="seconds between a slave's copies of the master's configs"
    )
    truncate_on_divergence: bool = Field(
        default=True,
        description="a slave starting with a tail its master's epochs do not confirm cuts it",
    )
    replication_token: SecretStr | None = Field(
        default=None,
        description="the bearer token a slave presents to its master's /v1/replication routes "
        "when the master has an auth file (an admin token of that file; prefer the env var)",
    )

    # ---------------------------------------------------------------- cluster
    cluster: str | None = Field(
        default=None,
        description="cluster name: join it through etcd (election and failover by group)",
    )
    etcd: str | None = Field(
        default=None, description="etcd client URLs, comma-separated (needed with --cluster)"
    )
    broker_group: str | None = Field(
        default=None,
        description="this broker's group in the cluster (its master and slaves; default "
        "the broker name)",
    )
    etcd_lease_ttl_s: int = Field(
        default=3, ge=1, le=60, description="seconds a dead broker's lease lasts in etcd"
    )
    advertise_url: str | None = Field(
        default=None,
        description="this broker's HTTP base URL as others reach it (default http://HOST:PORT)",
    )

    # ---------------------------------------------------------------- HTTP limits
    max_request_bytes: int = Field(
        default=MAX_REQUEST_BYTES, ge=1024, description="largest request body in bytes (413 beyond)"
    )
    max_batch_messages: int = Field(default=1000, ge=1, description="most messages in one batch")
    max_batch_bytes: int = Field(
        default=4 * MIB, ge=1, description="largest sum of bodies in one batch"
    )
    max_pull_bytes: int = Field(
        default=8 * MIB,
        ge=1024,
        le=MAX_PULL_BYTES,
        description="byte budget of a pull when its max_bytes is absent or larger "
        "(one message may still be larger)",
    )
    body_read_timeout_s: float = Field(
        default=30.0, gt=0, description="seconds a request body may stall before 408"
    )
    header_read_timeout_s: float = Field(
        default=10.0, gt=0, description="seconds a client has to send a request's headers"
    )
    keep_alive_timeout_s: int = Field(
        default=5, ge=1, description="seconds an idle keep-alive connection stays open"
    )
    max_header_bytes: int = Field(
        default=64 * 1024, ge=4096, description="largest request line and headers (431 beyond)"
    )

    # ---------------------------------------------------------------- security
    auth_file: Path | None = Field(
        default=None,
        description="bearer tokens and their permissions (TOML, or JSON); without it every "
        "caller is admin and the server listens on loopback only",
    )
    allow_anonymous: bool = Field(
        default=False,
        description="without an auth file, listen on a non-loopback address anyway",
    )
    audit_log: Path | None = Field(
        default=None, description="JSON-lines log of admin actions (default <store-dir>/audit.log)"
    )
    rate_limit_per_s: float = Field(
        default=1000.0,
        ge=0,
        description="requests per second per token unless its entry sets one (0: no limit)",
    )
    rate_limit_burst: int = Field(
        default=2000, ge=1, description="requests a token may make at once beyond its rate"
    )
    max_parked_pulls_per_token: int = Field(
        default=100, ge=0, description="long-polls one token may have waiting (429 beyond)"
    )
    admin_session_ttl_s: int = Field(
        default=8 * 3600, ge=60, description="seconds an admin login lasts"
    )
    secure_cookies: bool = Field(
        default=False,
        description="mark cookies Secure over plain http too (behind a TLS proxy); "
        "https requests always get Secure cookies",
    )
    tls_cert: Path | None = Field(
        default=None,
        description="PEM certificate served on HTTP and the HA port (https; with --tls-key), "
        "and presented to etcd and masters when they ask for one",
    )
    tls_key: Path | None = Field(default=None, description="the PEM private key of --tls-cert")
    tls_ca: Path | None = Field(
        default=None,
        description="PEM CA that peers' certificates are checked against: https masters and "
        "etcd, TLS masters' HA ports, and clients presenting a certificate (required on the "
        "HA port)",
    )

    @field_validator("auth_file", "audit_log", "tls_cert", "tls_key", "tls_ca", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        """``SPOOLMQ_AUTH_FILE=`` (empty) means none, e.g. to unset the Dockerfile's."""
        return None if value == "" else value

    @field_validator(
        "ha_listen",
        "grpc_listen",
        "master_ha",
        "master_http",
        "master_name",
        "cluster",
        "etcd",
        "broker_group",
        "advertise_url",
        mode="before",
    )
    @classmethod
    def _empty_address_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("ha_listen", "master_ha", "grpc_listen")
    @classmethod
    def _host_port(cls, value: str | None) -> str | None:
        if value is not None:
            split_host_port(value)
        return value

    @field_validator("cluster", "broker_group")
    @classmethod
    def _cluster_name(cls, value: str | None) -> str | None:
        if value is not None and re.fullmatch(BROKER_NAME_PATTERN, value) is None:
            raise ValueError(f"expected letters, digits, '.', '_' or '-', got {value!r}")
        return value

    @field_validator("etcd")
    @classmethod
    def _etcd_urls(cls, value: str | None) -> str | None:
        if value is not None:
            for url in value.split(","):
                parts = urlsplit(url.strip())
                if parts.scheme not in ("http", "https") or not parts.netloc:
                    raise ValueError(f"expected http(s) URLs, got {url!r}")
        return value

    @field_validator("master_http", "advertise_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None:
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ValueError(f"expected an http(s) URL, got {value!r}")
            value = value.rstrip("/")
        return value

    @model_validator(mode="after")
    def _slave_needs_master(self) -> Settings:
        if self.cluster is not None:
            self._check_cluster()
        elif self.role == "slave" and (self.master_http is None or self.master_ha is None):
            raise ValueError("a slave needs --master-http and --master-ha")
        if self.replication == "sync" and self.ha_listen is None:
            raise ValueError("sync replication needs --ha-listen (slaves connect there)")
        if self.min_in_sync_replicas > 1 and self.replication != "sync":
            raise ValueError(
                "--min-in-sync-replicas above 1 needs --replication sync (async answers a "
                "send before any slave has it)"
            )
        problems = check_timer_config(self.timer_config(), self.file_reserved_time_hours)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _tls_files_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key are given together")
        return self

    def tls(self) -> TlsConfig | None:
        """The certificate files (None without any)."""
        if self.tls_cert is None and self.tls_key is None and self.tls_ca is None:
            return None
        return TlsConfig(self.tls_cert, self.tls_key, self.tls_ca)

    def _check_cluster(self) -> None:
        if self.etcd is None:
            raise ValueError("--cluster needs --etcd (the etcd client URLs)")
        if self.ha_listen is None or split_host_port(self.ha_listen)[1] == 0:
            raise ValueError("--cluster needs --ha-listen with a fixed port (slaves follow it)")

    @property
    def in_cluster(self) -> bool:
        return self.cluster is not None

    def http_url(self) -> str:
        """How other brokers and clients reach this one over HTTP."""
        scheme = "https" if self.tls_cert is not None else "http"
        return self.advertise_url or f"{scheme}://{self.host}:{self.port}"

    def cluster_config(self, http_url: str | None = None) -> ClusterConfig | None:
        """Where this broker belongs in its cluster (None outside cluster mode)."""
        if self.cluster is None or self.etcd is None or self.ha_listen is None:
            return None
        return ClusterConfig(
            cluster=self.cluster,
            group=self.broker_group or self.broker_name,
            etcd_endpoints=[url.strip().rstrip("/") for url in self.etcd.split(",")],
            http_url=http_url or self.http_url(),
            ha_address=self.ha_listen,
            lease_ttl_s=self.etcd_lease_ttl_s,
            tls=self.tls(),
        )

    def master_address(self) -> MasterAddress | None:
        if self.role != "slave" or self.master_http is None or self.master_ha is None:
            return None
        return MasterAddress(self.master_name or self.master_ha, self.master_http, self.master_ha)

    def store_config(self) -> StoreConfig:
        """The StoreConfig (and its RetentionConfig) with every field this class shares."""
        flush = FlushDiskType.SYNC_FLUSH if self.flush == "sync" else FlushDiskType.ASYNC_FLUSH
        return StoreConfig(
            **self._shared(StoreConfig),
            flush_disk_type=flush,
            retention=RetentionConfig(**self._shared(RetentionConfig)),
            timer=self.timer_config(),
        )

    def timer_config(self) -> TimerConfig:
        return TimerConfig(
            enabled=self.timer_enabled,
            precision_ms=self.timer_precision_ms,
            max_delay_s=self.timer_max_delay_s,
        )

    def _shared(self, config: type[Any]) -> dict[str, Any]:
        names = type(self).model_fields
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(config) if f.name in names
        }

    def broker_config(self) -> BrokerConfig:
        return BrokerConfig(
            store_dir=self.store_dir,
            store=self.store_config(),
            topics=TopicPolicy(self.auto_create_topics, self.default_topic_queue_nums),
            groups=GroupPolicy(self.auto_create_groups),
            send=SendLimits(self.max_batch_messages, self.max_batch_bytes),
            max_parked_pulls=self.max_parked_pulls,
            max_wait_ms=self.long_poll_max_ms,
            offset_persist_interval_s=self.offset_persist_interval_s,
            dedup_window_s=self.dedup_window_s,
            trace=self.trace,
            trace_sample_rate=self.trace_sample_rate,
            transactions=TransactionConfig(
                timeout_ms=self.transaction_timeout_ms,
                check_interval_ms=self.transaction_check_interval_ms,
                check_max=self.transaction_check_max,
                op_max_size=self.transaction_op_msg_max_size,
            ),
            role=self.role,
            replication=self.replication,
            broker_name=self.broker_name,
            broker_group=self.broker_group,
            ha_listen=self.ha_listen,
            master=self.master_address(),
            ha_max_gap_bytes=self.ha_max_gap_bytes,
            ha_catch_up_window_s=self.ha_catch_up_window_s,
            ha_heartbeat_s=self.ha_heartbeat_s,
            min_in_sync_replicas=self.min_in_sync_replicas,
            config_sync_interval_s=self.config_sync_interval_s,
            truncate_on_divergence=self.truncate_on_divergence,
            replication_token=(
                self.replication_token.get_secret_value() if self.replication_token else None
            ),
            cluster_managed=self.in_cluster,
            tls=self.tls(),
        )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment once."""
    return Settings()
