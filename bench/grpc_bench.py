"""RocketMQ 5's gRPC face against the HTTP API: send and receive + ack throughput, same run.

Against one ``spoolmq serve --grpc-listen`` process started here on 127.0.0.1 (pinned to CPU 0
when ``taskset`` exists; the clients run in this process, on CPU 1). Both faces are driven the
same way: ``--concurrency`` calls in flight at once from one asyncio loop — the gRPC face with
the raw generated stubs of ``rocketmq.grpc_protocol`` over one ``grpc.aio`` channel (not the
official client, whose synchronous calls would measure its own threads), the HTTP API over one
keep-alive connection per call in flight (``http_bench.Connection``: each request written at
once, TCP_NODELAY). Three ways, each on a topic of its own (8 queues, 1 KiB messages):

1. single send: one message per call (``SendMessage`` / ``POST .../messages``);
2. batch send: ``--batch`` messages per call (one ``SendMessage`` with several messages / a
   JSON batch), messages/s;
3. receive + ack: a POP group consumes what the single sends stored, ``--batch`` per receive
   and one ack call for the handles it got (``ReceiveMessage`` + ``AckMessage`` /
   ``POST .../receive`` + ``POST .../acks``), messages/s.

Prints each figure and the ratio gRPC / HTTP. Run by hand (not part of the test suite)::

    uv run python bench/grpc_bench.py
    uv run python bench/grpc_bench.py --messages 20000 --concurrency 16 --batch 16
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
from http_bench import (  # bench/ is on sys.path when this file runs
    Connection,
    free_port,
    pinned,
    server,
)
from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2,
    service_pb2,
    service_pb2_grpc,
)

BIN = Path(sys.executable).parent
BODY_1K = b"x" * 1024
QUEUES = 8


@contextlib.contextmanager
def grpc_server(store: Path, port: int, grpc_port: int) -> Iterator[str]:
    """``spoolmq serve`` with its gRPC face, on CPU 0 (``http_bench.server``); its HTTP URL."""
    url = f"http://127.0.0.1:{port}"
    command = [
        str(BIN / "spoolmq"),
        "serve",
        "--store-dir",
        str(store),
        "--port",
        str(port),
        "--grpc-listen",
        f"127.0.0.1:{grpc_port}",
        "--log-level",
        "warning",
    ]
    with server(command, url, "/readyz", store.parent):
        yield url


async def run_calls(count: int, concurrency: int, call: Callable[[int], Awaitable[int]]) -> float:
    """``count`` units of work done by ``concurrency`` workers; each call (given its worker's
    index) returns how many units it did (0: nothing left to do now). Units per second."""
    done = 0
    started = time.perf_counter()

    async def worker(index: int) -> None:
        nonlocal done
        idle = 0
        while done < count and idle < 50:
            got = await call(index)
            done += got
            idle = 0 if got else idle + 1

    await asyncio.gather(*(worker(index) for index in range(concurrency)))
    if done < count:
        raise RuntimeError(f"only {done} of {count} done")
    return done / (time.perf_counter() - started)


def grpc_message(topic: str) -> Any:
    return definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=BODY_1K)


async def grpc_figures(address: str, topic: str, args: argparse.Namespace) -> dict[str, float]:
    metadata = (("x-mq-client-id", "grpc-bench"),)
    figures: dict[str, float] = {}
    async with grpc.aio.insecure_channel(address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)

        async def send(_: int, size: int = 1, to: str = topic) -> int:
            request = service_pb2.SendMessageRequest(
                messages=[grpc_message(to) for _ in range(size)]
            )
            answer = await stub.SendMessage(request, metadata=metadata, timeout=30)
            assert answer.status.code == definition_pb2.Code.OK, answer.status
            return size

        figures["single send"] = await run_calls(args.messages, args.concurrency, send)
        batch_topic = f"{topic}Batch"

        async def send_batch(n: int) -> int:
            return await send(n, args.batch, batch_topic)

        figures["batch send"] = await run_calls(args.messages, args.concurrency, send_batch)
        group = definition_pb2.Resource(name=f"{topic}Workers")

        async def receive_and_ack(_: int) -> int:
            request = service_pb2.ReceiveMessageRequest(
                group=group,
                message_queue=definition_pb2.MessageQueue(
                    topic=definition_pb2.Resource(name=topic)
                ),
                batch_size=args.batch,
                auto_renew=False,
            )
            request.invisible_duration.seconds = 60
            request.long_polling_timeout.seconds = 1
            handles = [
                (
                    answer.message.system_properties.message_id,
                    answer.message.system_properties.receipt_handle,
                )
                async for answer in stub.ReceiveMessage(request, metadata=metadata, timeout=30)
                if answer.HasField("message")
            ]
            if not handles:
                return 0
            ack = service_pb2.AckMessageRequest(
                group=group,
                topic=definition_pb2.Resource(name=topic),
                entries=[
                    service_pb2.AckMessageEntry(message_id=mid, receipt_handle=handle)
                    for mid, handle in handles
                ],
            )
            answer = await stub.AckMessage(ack, metadata=metadata, timeout=30)
            assert answer.status.code == definition_pb2.Code.OK, answer.status
            return len(handles)

        figures["receive + ack"] = await run_calls(args.messages, args.concurrency, receive_and_ack)
    return figures


async def http_figures(port: int, topic: str, args: argparse.Namespace) -> dict[str, float]:
    """The same three ways over keep-alive HTTP/1.1 connections, one per worker, each request
    written at once with TCP_NODELAY (:class:`http_bench.Connection`): an HTTP client that
    writes its head and body apart would wait on delayed acks and measure those instead."""
    figures: dict[str, float] = {}
    connections = [await Connection.open(port) for _ in range(args.concurrency)]
    body = BODY_1K.decode()
    single = json.dumps({"body": body}).encode()

    async def send(worker: int) -> int:
        status, answer = await connections[worker].request(
            "POST", f"/v1/topics/{topic}/messages", single
        )
        assert status == 201, answer
        return 1

    figures["single send"] = await run_calls(args.messages, args.concurrency, send)
    batch = json.dumps({"messages": [{"body": body} for _ in range(args.batch)]}).encode()

    async def send_batch(worker: int) -> int:
        status, answer = await connections[worker].request(
            "POST", f"/v1/topics/{topic}Batch/messages", batch
        )
        assert status == 201, answer
        return int(args.batch)

    figures["batch send"] = await run_calls(args.messages, args.concurrency, send_batch)
    receive = json.dumps({"max_messages": args.batch, "wait_ms": 1000, "invisible_ms": 60_000})

    async def receive_and_ack(worker: int) -> int:
        connection = connections[worker]
        status, answer = await connection.request(
            "POST", f"/v1/groups/{topic}Workers/topics/{topic}/receive", receive.encode()
        )
        assert status == 200, answer
        handles = [m["receipt_handle"] for m in json.loads(answer)["messages"]]
        if not handles:
            return 0
        acks = json.dumps({"receipt_handles": handles}).encode()
        status, answer = await connection.request("POST", f"/v1/groups/{topic}Workers/acks", acks)
        assert status == 200, answer
        return len(handles)

    figures["receive + ack"] = await run_calls(args.messages, args.concurrency, receive_and_ack)
    for connection in connections:
        connection.close()
    return figures


def create_topics(url: str, *names: str) -> None:
    for name in names:
        body = {"read_queue_nums": QUEUES, "write_queue_nums": QUEUES}
        answer = httpx.put(f"{url}/v1/topics/{name}", json=body, timeout=30)
        assert answer.status_code == 201, answer.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    if pinned(1):
        os.sched_setaffinity(0, {1})
    with tempfile.TemporaryDirectory(prefix="grpc-bench-") as scratch:
        grpc_port = free_port()
        http_port = free_port()
        with grpc_server(Path(scratch) / "store", http_port, grpc_port) as url:
            create_topics(url, "ViaGrpc", "ViaGrpcBatch", "ViaHttp", "ViaHttpBatch")
            via_grpc = asyncio.run(grpc_figures(f"127.0.0.1:{grpc_port}", "ViaGrpc", args))
            via_http = asyncio.run(http_figures(http_port, "ViaHttp", args))
    load = os.getloadavg()
    print(
        f"{args.messages} x 1 KiB messages per way, {args.concurrency} calls in flight, "
        f"batch {args.batch}; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    print(f"{'way':<16}{'gRPC msgs/s':>14}{'HTTP msgs/s':>14}{'gRPC / HTTP':>14}")
    for way, rate in via_grpc.items():
        print(f"{way:<16}{rate:>14,.0f}{via_http[way]:>14,.0f}{rate / via_http[way]:>13.2f}x")


if __name__ == "__main__":
    main()
