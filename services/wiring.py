"""The services of a running broker, built over its open store in dependency order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.appender import Appender
from services.broker_config import BrokerConfig
from services.dlq import DlqService
from services.dlq_watermark import DlqWatermark
from services.groups import GroupService
from services.idempotency import IdempotencyService
from services.long_poll import WaiterRegistry
from services.messages import MessageQueryService
from services.metrics import Metrics
from services.offset_reset import OffsetResetService
from services.offsets import OffsetService
from services.pop.service import ConsumerServices, PopService
from services.pull import PullService
from services.record_reads import RecordReadService
from services.redrive_jobs import RedriveJobs
from services.send import SendService
from services.send_back import SendBackService
from services.store_status import StoreStatusService
from services.topics import TopicService
from services.trace.lookup import TraceLookup
from services.trace.switch import TraceSwitch, any_topic_traced
from services.trace.tracer import Tracer, store_reader
from services.trace.writer import TraceWriter
from services.transaction.service import TransactionService
from storage import MessageStore
from storage.config_managers import (
    ConsumerOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)


@dataclass(frozen=True, slots=True)
class BrokerServices:
    """The services over one open store, built in dependency order."""

    topics: TopicService
    groups: GroupService
    offsets: OffsetService
    send: SendService
    pull: PullService
    records: RecordReadService
    messages: MessageQueryService
    send_back: SendBackService
    offset_reset: OffsetResetService
    dlq: DlqService
    redrive_jobs: RedriveJobs
    store_status: StoreStatusService
    pop: PopService
    idempotency: IdempotencyService
    transactions: TransactionService
    tracer: Tracer
    trace: TraceLookup

    @classmethod
    def build(
        cls,
        config: BrokerConfig,
        store: MessageStore,
        appender: Appender,
        *,
        topic_configs: TopicConfigManager,
        group_configs: SubscriptionGroupManager,
        consumer_offsets: ConsumerOffsetManager,
        metrics: Metrics,
        waiters: WaiterRegistry,
        on_slave: Callable[[], bool],
    ) -> BrokerServices:
        put = appender.put
        idempotency = IdempotencyService(store, appender, config.dedup_window_s)
        topics = TopicService(store, topic_configs, consumer_offsets, config.topics)
        groups = GroupService(group_configs, consumer_offsets, config.groups)
        switch = TraceSwitch(
            topic_configs.get,
            any_topic_traced(lambda: topic_configs.data_version.counter, topic_configs.all),
            default=config.trace,
            sample_rate=config.trace_sample_rate,
        )
        tracer = Tracer(
            switch, TraceWriter(put, metrics, topics.ensure), store_reader(store.get_message)
        )
        offsets = OffsetService(store, consumer_offsets, topics, groups, tracer=tracer)
        send_back = SendBackService(
            store, groups.for_use, topics.ensure, idempotency.reput, tracer=tracer
        )
        watermark = DlqWatermark(store, consumer_offsets)
        dlq = DlqService(store, topics.for_send, idempotency, watermark, tracer=tracer)
        consumers = ConsumerServices(topics, groups, offsets, waiters, metrics)
        send = SendService(
            topics,
            put,
            metrics,
            config.send,
            delay_levels=store.delay_levels,
            idempotency=idempotency,
            timer_group=config.group,
            timer_precision_ms=store.config.timer.precision_ms,
            tracer=tracer,
        )
        pop = PopService(
            store,
            config.store_dir / "config",
            consumers,
            send_back,
            put,
            max_wait_ms=config.max_wait_ms,
            tracer=tracer,
        )
        messages = MessageQueryService(store, topics)
        return cls(
            topics=topics,
            groups=groups,
            offsets=offsets,
            send=send,
            pull=PullService(
                store,
                topics,
                groups,
                offsets,
                waiters,
                metrics,
                max_wait_ms=config.max_wait_ms,
                on_slave=on_slave,
                tracer=tracer,
            ),
            records=RecordReadService(
                store,
                topics,
                groups,
                waiters,
                metrics,
                max_wait_ms=config.max_wait_ms,
                on_slave=on_slave,
            ),
            messages=messages,
            send_back=send_back,
            offset_reset=OffsetResetService(store, consumer_offsets, topics, groups),
            dlq=dlq,
            redrive_jobs=RedriveJobs(dlq),
            store_status=StoreStatusService(store, config.store_dir),
            pop=pop,
            idempotency=idempotency,
            transactions=TransactionService(
                store,
                put,
                send,
                idempotency,
                waiters,
                metrics,
                config.transactions,
                topics,
                tracer=tracer,
            ),
            tracer=tracer,
            trace=TraceLookup(
                store.query_message,
                store.topics,
                messages.find,
                consumer_offsets,
                lambda: pop.table,
                switch,
            ),
        )
