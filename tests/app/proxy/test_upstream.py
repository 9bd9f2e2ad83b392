"""The proxy's keep-alive client against real sockets on 127.0.0.1: plain asyncio servers that
answer, close, stall or speak nonsense on cue — and what each failure is called."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from app.proxy.upstream import NotSentError, OutcomeUnknownError, Upstream
from tests.net import free_port

Behaviour = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def head(path: str = "/", body: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n" % (path.encode(), len(body))


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """One request's body (the requests here always carry a Content-Length)."""
    lines = (await reader.readuntil(b"\r\n\r\n")).split(b"\r\n")
    length = next(
        int(v) for k, _, v in (line.partition(b":") for line in lines) if k == b"content-length"
    )
    return await reader.readexactly(length)


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request with its own body, on one keep-alive connection."""
    while True:
        try:
            body = await read_request(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nx-kind: echo\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()


@asynccontextmanager
async def serving(behaviour: Behaviour) -> AsyncIterator[tuple[tuple[str, int], list[int]]]:
    """A server on a free port; yields its origin and a list that counts its connections."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await behaviour(reader, writer)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield ("127.0.0.1", port), connections
    finally:
        server.close()
        await server.wait_closed()


async def test_answers_come_back_whole_over_one_kept_connection() -> None:
    upstream = Upstream()
    async with serving(echo) as (origin, connections):
        small = await upstream.request(origin, head(body=b"one"), b"one", 5)
        big_body = bytes(range(256)) * 8192  # 2 MiB: several writes and reads each way
        big = await upstream.request(origin, head(body=big_body), big_body, 5)
        answers = await asyncio.gather(
            *(upstream.request(origin, head(body=b"%d" % i), b"%d" % i, 5) for i in range(8))
        )
    await upstream.aclose()
    assert (small.status, small.body, small.header(b"x-kind")) == (200, b"one", b"echo")
    assert big.body == big_body
    assert [a.body for a in answers] == [b"%d" % i for i in range(8)]
    assert len(connections) == 8  # the first two shared one, which is one of the eight


async def test_a_chunked_answer_is_joined() -> None:
    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
        await writer.drain()
        await reader.read()  # keep the connection until the client lets go

    upstream = Upstream()
    async with serving(chunked) as (origin, _):
        answer = await upstream.request(origin, head(), b"", 5)
    await upstream.aclose()
    assert (answer.status, answer.body) == (201, b"abcdefg")


async def test_a_refused_connection_was_never_sent() -> None:
    upstream = Upstream()
    with pytest.raises(NotSentError, match="connect failed"):
        await upstream.request(("127.0.0.1", free_port()), head(), b"", 5)


async def test_a_broker_that_reads_and_hangs_up_leaves_the_outcome_unknown() -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    upstream = Upstream()
    async with serving(hang_up) as (origin, _):
        with pytest.raises(OutcomeUnknownError, match="connection closed"):
            await upstream.request(origin, head(body=b"x"), b"x", 5)


async def test_a_broker_that_never_answers_times_out_with_an_unknown_outcome() -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()

    upstream = Upstream()
    async with serving(stall) as (origin, _):
        with pytest.raises(OutcomeUnknownError, match=r"no answer within 0\.2 s"):
            await upstream.request(origin, head(), b"", 0.2)


async def test_nonsense_instead_of_an_answer_is_an_unknown_outcome() -> None:
    async def babble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SPOOL/9 what\r\n\r\n")
        await writer.drain()
        await reader.read()

    upstream = Upstream()
    async with serving(babble) as (origin, _):
        with pytest.raises(OutcomeUnknownError, match="unparsable answer"):
            await upstream.request(origin, head(), b"", 5)


async def test_a_connection_the_broker_closed_while_idle_is_not_reused() -> None:
    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()  # then close: a keep-alive timeout on the broker's side

    upstream = Upstream()
    async with serving(once) as (origin, connections):
        first = await upstream.request(origin, head(body=b"a"), b"a", 5)
        for _ in range(100):  # until the client has seen the close
            await asyncio.sleep(0.01)
            if all(c.closed for c in upstream._idle.get(origin, [])):
                break
        second = await upstream.request(origin, head(body=b"b"), b"b", 5)
    await upstream.aclose()
    assert (first.body, second.body, len(connections)) == (b"a", b"b", 2)


async def test_no_free_connection_in_time_was_never_sent() -> None:
    release = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        await release.wait()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    upstream = Upstream(connect_timeout_s=0.2, max_per_origin=1)
    async with serving(slow) as (origin, _):
        busy = asyncio.create_task(upstream.request(origin, head(body=b"1"), b"1", 5))
        await asyncio.sleep(0.05)
        with pytest.raises(NotSentError, match="no free connection"):
            await upstream.request(origin, head(body=b"2"), b"2", 5)
        release.set()
        assert (await busy).body == b"1"
    await upstream.aclose()


def gated_echo(arrived: asyncio.Event, release: asyncio.Event, order: list[bytes]) -> Behaviour:
    """An upstream that notes each request's body in ``order``, sets ``arrived`` and echoes the
    body once ``release`` is set."""

    async def gated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                body = await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            order.append(body)
            arrived.set()
            await release.wait()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    return gated


async def test_requests_waiting_for_a_connection_get_one_in_turn() -> None:
    release, arrived = asyncio.Event(), asyncio.Event()
    order: list[bytes] = []

    gated = gated_echo(arrived, release, order)
    upstream = Upstream(connect_timeout_s=5, max_per_origin=1)
    async with serving(gated) as (origin, _):
        sent = [asyncio.create_task(upstream.request(origin, head(body=b"1"), b"1", 5))]
        await arrived.wait()
        for body in (b"2", b"3"):
            sent.append(asyncio.create_task(upstream.request(origin, head(body=body), body, 5)))
            await asyncio.sleep(0)  # it runs up to its wait for a connection
        assert order == [b"1"]  # one connection at a time: the others wait
        release.set()
        answers = [(await task).body for task in sent]
    assert (answers, order) == ([b"1", b"2", b"3"], [b"1", b"2", b"3"])
    await upstream.aclose()


async def test_a_request_that_gave_up_waiting_leaves_no_connection_taken() -> None:
    release, arrived = asyncio.Event(), asyncio.Event()

    gated = gated_echo(arrived, release, [])
    upstream = Upstream(connect_timeout_s=5, max_per_origin=1)
    async with serving(gated) as (origin, _):
        busy = asyncio.create_task(upstream.request(origin, head(body=b"1"), b"1", 5))
        await arrived.wait()
        impatient = asyncio.create_task(upstream.request(origin, head(body=b"2"), b"2", 5))
        await asyncio.sleep(0)  # it runs up to its wait for a connection
        impatient.cancel()
        with pytest.raises(asyncio.CancelledError):
            await impatient
        release.set()
        assert (await busy).body == b"1"
        assert (await upstream.request(origin, head(body=b"3"), b"3", 5)).body == b"3"
    await upstream.aclose()


async def test_a_shorter_wait_after_a_longer_one_on_the_same_connection_is_kept() -> None:
    """A long-poll's long timeout must not stretch the next exchange's on the same connection:
    a send's attempt (a few seconds) after a pull that waited up to a minute."""

    async def once_then_stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        body = await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        await read_request(reader)
        await reader.read()

    upstream = Upstream()
    async with serving(once_then_stall) as (origin, connections):
        first = await upstream.request(origin, head(body=b"a"), b"a", 3600)
        with pytest.raises(OutcomeUnknownError, match=r"no answer within 0\.2 s"):
            # the guard only keeps a failing run from waiting out the first hour
            await asyncio.wait_for(upstream.request(origin, head(body=b"b"), b"b", 0.2), 10)
    await upstream.aclose()
    assert (first.body, len(connections)) == (b"a", 1)
