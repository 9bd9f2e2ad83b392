"""Transactional messages: half send + commit against plain sends, in the same run.

1. In-process, on a broker over a temp store (ASYNC flush): ``--messages`` 1 KiB messages sent
   with ``SendService.send``, then as many half sends each followed by its commit
   (``TransactionService.prepare`` + ``end``), ``--concurrency`` at a time. A committed
   message costs three records (half, real, a share of an op record) and two puts.
2. HTTP, against one ``spoolmq serve``: the same with ``--concurrency`` httpx clients in one
   asyncio loop, a plain ``POST /v1/topics/{t}/messages`` against
   ``POST /v1/topics/{t}/transactions`` then ``POST /v1/transactions/{id}/commit``.

Each part alternates plain and transactional runs ``--repeat`` times and reports the median
messages/s of each, their ratio, and the median of the ratios of each transactional run to the
plain run just before it (steadier on a shared machine, where the load changes between runs).
Target (the issue): transactional >= 0.4x plain.

Run by hand::

    uv run python bench/transaction_bench.py
    uv run python bench/transaction_bench.py --skip-http --messages 20000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from services import Broker, BrokerConfig, OutgoingMessage, StoreConfig, TransactionConfig

BODY = b"x" * 1024
BIN = Path(sys.executable).parent
NEVER = TransactionConfig(timeout_ms=3_600_000, check_interval_ms=3_600_000)


async def timed(count: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> float:
    """Messages/s of ``count`` calls of ``one``, ``concurrency`` at a time."""
    queue = iter(range(count))

    async def worker() -> None:
        for number in queue:
            await one(number)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.perf_counter() - start)


async def in_process(messages: int, concurrency: int, repeat: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config = BrokerConfig(
            Path(tmp) / "store", StoreConfig(commit_log_file_size=256 << 20), transactions=NEVER
        )
        broker = Broker(config)
        await broker.start()
        try:
            send, transactions = broker.send, broker.transactions

            async def plain(number: int) -> None:
                await send.send("Plain", [OutgoingMessage(BODY)])

            async def transactional(number: int) -> None:
                prepared = await transactions.prepare("Tx", OutgoingMessage(BODY), "pg")
                await transactions.end(prepared.transaction.transaction_id, "pg", commit=True)

            return await alternate(messages, concurrency, repeat, plain, transactional)
        finally:
            await broker.stop()


async def over_http(messages: int, concurrency: int, repeat: int) -> tuple[float, float, float]:
    port = 18000 + int(time.time()) % 1000
    with tempfile.TemporaryDirectory() as tmp:
        process = serve(Path(tmp) / "store", port)
        try:
            url = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient(
                base_url=url, limits=httpx.Limits(max_connections=concurrency)
            ) as client:
                await wait_ready(client)
                text = BODY.decode()

                async def plain(number: int) -> None:
                    answer = await client.post("/v1/topics/Plain/messages", json={"body": text})
                    answer.raise_for_status()

                async def transactional(number: int) -> None:
                    sent = await client.post(
                        "/v1/topics/Tx/transactions",
                        json={"producer_group": "pg", "message": {"body": text}},
                    )
                    sent.raise_for_status()
                    transaction_id = sent.json()["transaction_id"]
                    ended = await client.post(
                        f"/v1/transactions/{transaction_id}/commit", json={"producer_group": "pg"}
                    )
                    ended.raise_for_status()

                return await alternate(messages, concurrency, repeat, plain, transactional)
        finally:
            process.terminate()
            process.wait(timeout=30)


def serve(store: Path, port: int) -> subprocess.Popen[bytes]:
    """``spoolmq serve`` on ``port``, checks far away (nothing is checked back)."""
    command = [str(BIN / "spoolmq"), "serve", "--store-dir", str(store), "--port", str(port)]
    command += ["--log-level", "warning", "--transaction-timeout-ms", "3600000"]
    env = {"SPOOLMQ_COMMIT_LOG_FILE_SIZE": str(256 << 20), "PATH": str(BIN)}
    return subprocess.Popen(command, env=env)


async def wait_ready(client: httpx.AsyncClient) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if (await client.get("/readyz")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError("the server did not become ready")


async def alternate(
    messages: int,
    concurrency: int,
    repeat: int,
    plain: Callable[[int], Awaitable[None]],
    transactional: Callable[[int], Awaitable[None]],
) -> tuple[float, float, float]:
    """Median messages/s of plain and transactional runs, alternated ``repeat`` times, and
    the median ratio of each transactional run to the plain run before it."""
    await timed(min(messages, 500), concurrency, plain)  # warm up
    await timed(min(messages, 500), concurrency, transactional)
    plains, transactionals = [], []
    for _ in range(repeat):
        plains.append(await timed(messages, concurrency, plain))
        transactionals.append(await timed(messages, concurrency, transactional))
    pairs = statistics.median(t / p for p, t in zip(plains, transactionals, strict=True))
    return statistics.median(plains), statistics.median(transactionals), pairs


def report(name: str, figures: tuple[float, float, float]) -> None:
    plain, transactional, pairs = figures
    print(
        f"{name}: plain {plain:,.0f} msg/s, half + commit {transactional:,.0f} msg/s, "
        f"ratio {transactional / plain:.2f}x, run by run {pairs:.2f}x (target >= 0.4x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    report("in-process", asyncio.run(in_process(args.messages, args.concurrency, args.repeat)))
    if not args.skip_http:
        http_messages = max(args.messages // 5, 1000)
        report("HTTP", asyncio.run(over_http(http_messages, args.concurrency, args.repeat)))


if __name__ == "__main__":
    main()
