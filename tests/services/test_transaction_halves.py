"""Half messages sent together share one append; each send still gets its own record, and a
half the store refuses fails its own send only."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from services import Broker, BrokerConfig, OutgoingMessage, TransactionConfig
from services.transaction.halves import HalfAppender
from services.transaction.records import half_message
from storage import Appended, Message, PutResult
from storage.errors import PropertiesTooLargeError
from storage.topic_names import TRANS_HALF_TOPIC
from tests.services.conftest import SMALL

NEVER = TransactionConfig(timeout_ms=600_000, check_interval_ms=600_000)


async def started(root: Path) -> Broker:
    broker = Broker(BrokerConfig(root / "store", SMALL, transactions=NEVER))
    await broker.start()
    return broker


def half(uniq_key: str, **properties: str) -> Message:
    message = Message("Orders", uniq_key.encode(), properties={"UNIQ_KEY": uniq_key, **properties})
    return half_message(message, "pg")


async def test_concurrent_half_sends_share_appends_and_each_gets_its_record(
    tmp_path: Path,
) -> None:
    broker = await started(tmp_path)
    try:
        service = broker.transactions
        await service.prepare("Orders", OutgoingMessage(b"first"), "pg")  # makes the topic
        halves = service._halves  # the test counts the appends the real appender makes
        appended: list[int] = []
        real_put = halves._put

        async def counting(messages: Sequence[Message]) -> Appended:
            appended.append(len(messages))
            return await real_put(messages)

        halves._put = counting
        prepared = await asyncio.gather(
            *(service.prepare("Orders", OutgoingMessage(f"m{n}".encode()), "pg") for n in range(20))
        )
        assert sum(appended) == 20 and len(appended) < 20
        assert sorted(p.half.queue_offset for p in prepared) == list(range(1, 21))
        store = broker._store
        assert store is not None
        for number, one in enumerate(prepared):
            record = store.look_message_by_offset(one.half.physical_offset)
            assert record is not None and record.topic == TRANS_HALF_TOPIC
            assert record.body == f"m{number}".encode()
            assert record.properties["__transactionId__"] == one.transaction.transaction_id
        for one in prepared:  # each ends as if sent alone
            await service.end(one.transaction.transaction_id, "pg", commit=True)
        assert sum(store.max_offset_in_queue("Orders", q) for q in range(8)) == 20
    finally:
        await broker.stop()


async def test_a_half_the_store_refuses_fails_its_own_send_only(tmp_path: Path) -> None:
    broker = await started(tmp_path)
    try:
        halves = HalfAppender(broker.transactions._halves._put)
        answers = await asyncio.gather(
            halves.put(half("A")),
            halves.put(half("B", big="x" * 40_000)),
            halves.put(half("C")),
            return_exceptions=True,
        )
        first, refused, last = answers
        assert isinstance(refused, PropertiesTooLargeError)
        assert isinstance(first, PutResult) and isinstance(last, PutResult)
        assert (first.queue_offset, last.queue_offset) == (0, 1)
    finally:
        await broker.stop()
