"""Prometheus text exposition (format 0.0.4) of the broker's counters and gauges."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services import Broker, BrokerState, Histogram

Sample = tuple[str, int | float]
"""(label set such as ``{topic="T"}`` or "", value)"""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _per_topic(counter: Mapping[str, int]) -> list[Sample]:
    return [(f'{{topic="{_escape(topic)}"}}', count) for topic, count in sorted(counter.items())]


class _Page:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[Sample]) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")
        self.lines.extend(f"{name}{labels} {value}" for labels, value in samples)

    def one(self, name: str, kind: str, help_text: str, value: int | float) -> None:
        self.family(name, kind, help_text, [("", value)])


def _histogram(page: _Page, name: str, help_text: str, histogram: Histogram) -> None:
    page.lines.append(f"# HELP {name} {help_text}")
    page.lines.append(f"# TYPE {name} histogram")
    for bound, count in histogram.cumulative():
        page.lines.append(f'{name}_bucket{{le="{bound:g}"}} {count}')
    page.lines.append(f'{name}_bucket{{le="+Inf"}} {histogram.count}')
    page.lines.append(f"{name}_sum {histogram.total:.6f}")
    page.lines.append(f"{name}_count {histogram.count}")


def _timer_metrics(page: _Page, broker: Broker) -> None:
    """The timer wheel's counters (RocketMQ's rocketmq_timer_* family), on a master."""
    progress = broker.timers.progress()
    if progress is None:
        return
    stats = progress.stats
    for name, help_text, value in (
        ("scheduled", "Timer messages placed in the wheel (again at each roll).", stats.scheduled),
        ("delivered", "Timer messages put into their topic at their time.", stats.delivered),
        ("cancelled", "Timer messages dropped at their time because of a cancel.", stats.cancelled),
        (
            "cancels_accepted",
            "Cancels answered `cancelled` (a repeat of one is not counted again).",
            stats.cancels_accepted,
        ),
        ("rolled", "Timer messages put back for a later turn of the wheel.", stats.rolled),
    ):
        page.one(f"spoolmq_timer_{name}_total", "counter", help_text, value)
    page.family(
        "spoolmq_timer_topic_delivered_total",
        "counter",
        "Timer messages put into their topic at their time, by topic.",
        _per_topic(stats.delivered_by_topic),
    )
    page.family(
        "spoolmq_timer_topic_cancelled_total",
        "counter",
        "Timer messages dropped at their time because of a cancel, by topic.",
        _per_topic(stats.cancelled_by_topic),
    )
    page.one(
        "spoolmq_timer_enqueue_behind",
        "gauge",
        "Timer messages stored but not yet placed in the wheel.",
        progress.enqueue_behind,
    )
    _histogram(
        page,
        "spoolmq_timer_lateness_seconds",
        "How long after its slot's end a timer message was put into its topic.",
        stats.lateness,
    )


def _replication_metrics(page: _Page, broker: Broker) -> None:
    """The in-sync replicas a master counts, against the number it needs to take writes."""
    replica = broker.replica
    page.one(
        "spoolmq_in_sync_replicas",
        "gauge",
        "A master: itself and its slaves in sync (0 on a slave).",
        replica.in_sync_replicas(),
    )
    page.one(
        "spoolmq_min_in_sync_replicas",
        "gauge",
        "With fewer replicas in sync a master refuses writes.",
        replica.config.min_in_sync_replicas,
    )


def render_metrics(broker: Broker, disk_used_bytes: int) -> str:
    """The metrics page; the store gauges only while the broker runs."""
    m = broker.metrics
    page = _Page()
    page.one("spoolmq_up", "gauge", "1 when the broker is running.", int(broker.running))
    page.family(
        "spoolmq_messages_in_total", "counter", "Messages stored.", _per_topic(m.messages_in)
    )
    page.family("spoolmq_bytes_in_total", "counter", "Body bytes stored.", _per_topic(m.bytes_in))
    page.family(
        "spoolmq_messages_out_total", "counter", "Messages pulled.", _per_topic(m.messages_out)
    )
    page.family("spoolmq_bytes_out_total", "counter", "Body bytes pulled.", _per_topic(m.bytes_out))
    page.family(
        "spoolmq_sends_replayed_total",
        "counter",
        "Sends answered with an earlier send's receipts (same Idempotency-Key).",
        _per_topic(m.sends_replayed),
    )
    _histogram(
        page,
        "spoolmq_pull_duration_seconds",
        "Time to answer a pull, long-poll wait included.",
        m.pull_duration,
    )
    waiters = broker.waiters
    page.one("spoolmq_long_polls_parked", "gauge", "Pulls parked for messages.", waiters.parked)
    page.one(
        "spoolmq_long_polls_rejected_total",
        "counter",
        "Pulls refused with 429 at the parked cap.",
        waiters.rejected,
    )
    page.one(
        "spoolmq_long_polls_woken_total",
        "counter",
        "Parked pulls woken by arrivals.",
        waiters.woken,
    )
    page.one(
        "spoolmq_offset_persists_total",
        "counter",
        "Periodic writes of consumerOffset.json.",
        broker.offset_persist_count,
    )
    for name, help_text, value in (
        ("received", "Messages handed out by POP receives.", m.pop_received),
        ("acked", "Messages acked by POP consumers (a repeated ack counts once).", m.pop_acked),
        ("ack_expired", "POP acks answered expired.", m.pop_ack_expired),
        ("expired", "POP deliveries whose invisibility ran out.", m.pop_expired),
        ("redelivered", "Expired POP deliveries put back into %RETRY%<group>.", m.pop_redelivered),
        ("dead_lettered", "Expired POP deliveries sent to %DLQ%<group>.", m.pop_dead_lettered),
    ):
        page.one(f"spoolmq_pop_{name}_total", "counter", help_text, value)
    for name, help_text in (
        ("prepared", "Half messages stored by transactional sends."),
        ("committed", "Transactions committed (a repeated commit counts once)."),
        ("rolled_back", "Transactions rolled back (a repeated rollback counts once)."),
        ("checked", "Check-backs offered to producer groups."),
        ("gave_up", "Transactions copied to TRANS_CHECK_MAX_TIME_TOPIC after the last check."),
    ):
        page.one(f"spoolmq_transactions_{name}_total", "counter", help_text, m.transactions[name])
    page.one(
        "spoolmq_trace_events_written_total",
        "counter",
        "Message trace events stored in RMQ_SYS_TRACE_TOPIC.",
        m.trace_events_written,
    )
    page.family(
        "spoolmq_trace_events_dropped_total",
        "counter",
        "Message trace events dropped: the writer's queue was full, or the store refused them.",
        [
            (f'{{reason="{reason}"}}', m.trace_events_dropped[reason])
            for reason in ("queue_full", "not_stored")
        ],
    )
    if broker.state is BrokerState.RUNNING:
        _timer_metrics(page, broker)
        _replication_metrics(page, broker)
        page.one(
            "spoolmq_pop_in_flight",
            "gauge",
            "POP messages received and not yet acked.",
            broker.pop.table.in_flight(),
        )
        g = broker.store_gauges()
        page.one(
            "spoolmq_commitlog_max_offset_bytes",
            "gauge",
            "End of written data in the CommitLog.",
            g.commit_log_max_offset,
        )
        page.one(
            "spoolmq_commitlog_min_offset_bytes",
            "gauge",
            "Start of the oldest CommitLog file.",
            g.commit_log_min_offset,
        )
        page.one(
            "spoolmq_flush_lag_bytes",
            "gauge",
            "CommitLog bytes written but not yet forced to disk.",
            g.flush_lag_bytes,
        )
        page.one(
            "spoolmq_dispatch_behind_bytes",
            "gauge",
            "CommitLog bytes not yet in a ConsumeQueue.",
            g.dispatch_behind_bytes,
        )
        page.one(
            "spoolmq_store_writeable", "gauge", "1 when the store accepts writes.", int(g.writeable)
        )
        page.one(
            "spoolmq_store_disk_full",
            "gauge",
            "1 while writes are refused for a full disk (over the warning ratio, or ENOSPC).",
            int(g.disk_full),
        )
        page.one(
            "spoolmq_store_flush_failed",
            "gauge",
            "1 after an fsync failed: nothing more is acknowledged until a restart.",
            int(g.flush_failed),
        )
        page.one(
            "spoolmq_dispatch_stalled",
            "gauge",
            "1 while a dispatch failure leaves records undispatched (retried).",
            int(g.dispatch_stalled),
        )
        page.family(
            "spoolmq_disk_used_ratio",
            "gauge",
            "Used / total of each file system the store writes to, at the last sample.",
            [
                (f'{{path="{_escape(path)}"}}', round(ratio, 4))
                for path, ratio in g.disk_used_ratios
            ],
        )
    page.one("spoolmq_disk_used_bytes", "gauge", "Disk blocks used by the store.", disk_used_bytes)
    return "\n".join(page.lines) + "\n"
