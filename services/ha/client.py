"""The slave's HA client: stream the master's CommitLog and append it byte for byte.

On each connect it fetches the master's epochs and refuses to stream when this log has a
tail the master never confirmed (truncation happens at startup, before the store opens).
Then it says its name and max offset, appends every batch through
``MessageStore.append_replicated`` (which dispatches and wakes long-polls), and reports its
max offset after each batch and every heartbeat. A lost connection is retried with backoff.
A master that sends nothing (no batch, no heartbeat) for five of its heartbeats is taken as
gone, as RocketMQ's HA housekeeping does: a partition that swallows the master's frames (and its
FIN) must not leave the slave waiting on a dead connection until TCP gives up.

A master with an auth file challenges the slave first: it answers with the proof of its
replication token (:mod:`services.ha.auth`). A refusal (no token, a wrong one, another
reason the master gives) is the slave's ``error`` in its replication status, and retried.
With a certificate (``tls``) the slave speaks TLS to the HA port and checks the master's
certificate against its CA; https master URLs are checked against the same CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping

import httpx

from services.background import BackgroundTask
from services.errors import ReplicaDivergedError
from services.ha.address import MasterAddress, split_host_port
from services.ha.auth import proof, replica_key
from services.ha.epochs import check_consistent, fetch_master_epochs
from services.ha.protocol import (
    CHALLENGE,
    MAX_REASON_BYTES,
    NONCE_BYTES,
    OFFSET_REPORT,
    REFUSED,
    TRANSFER_HEADER,
    hello,
)
from services.tls import TlsConfig
from storage import MessageStore
from storage.commit_log import ReplicaAppendError
from storage.epoch_file import EpochEntry, EpochFile

log = logging.getLogger(__name__)

_BACKOFF_FIRST_S = 0.1
_BACKOFF_MAX_S = 2.0
_SILENT_HEARTBEATS = 5


class HARefusedError(Exception):
    """The master refused this slave on its HA port (the reason is the message)."""


class HAClient:
    """One slave's replication from one master."""

    def __init__(
        self,
        store: MessageStore,
        epochs: EpochFile,
        master: MasterAddress,
        name: str,
        heartbeat_s: float = 1.0,
        http_headers: Mapping[str, str] | None = None,
        replication_token: str | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self.store = store
        self.epochs = epochs
        self.master = master
        self.name = name
        self.heartbeat_s = heartbeat_s
        self.silence_s = _SILENT_HEARTBEATS * heartbeat_s
        self.http_headers = http_headers
        self._key = replica_key(replication_token) if replication_token else None
        self.tls = tls
        self.connected = False
        self.error: str | None = None
        self._replicating = BackgroundTask(f"ha-client-{master.name}", self._run)
        self._remote_epochs: list[EpochEntry] = []

    def start(self) -> None:
        self._replicating.start()

    async def stop(self) -> None:
        await self._replicating.stop()
        self.connected = False

    async def check(self) -> None:
        """Fetch the master's epochs; ReplicaDivergedError when this log diverges."""
        remote = await fetch_master_epochs(self.master.http_url, self.http_headers, self.tls)
        check_consistent(
            self.epochs.entries, remote, self.store.max_physical_offset, self.master.http_url
        )
        self._remote_epochs = remote
        self._adopt_epochs()

    async def _run(self) -> None:
        backoff = _BACKOFF_FIRST_S
        while True:
            try:
                await self.check()
                await self._stream()
                backoff = _BACKOFF_FIRST_S
            except ReplicaDivergedError as exc:
                self.error = str(exc)
                log.error("replication stopped: %s", exc)
                return
            except HARefusedError as exc:
                self.error = f"master {self.master.name} refused this slave: {exc}"
                log.warning("replication from %s refused: %s", self.master.ha_address, exc)
            except (OSError, asyncio.IncompleteReadError, httpx.HTTPError, ValueError) as exc:
                self.error = f"master {self.master.name} unreachable or refused: {exc}"
                log.info("replication from %s interrupted: %s", self.master.ha_address, exc)
            finally:
                self.connected = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    async def _stream(self) -> None:
        host, port = split_host_port(self.master.ha_address)
        tls = self.tls
        context = tls.client_context() if tls is not None and tls.serves else None
        reader, writer = await asyncio.open_connection(
            host, port, ssl=context, server_hostname=host if context else None
        )
        reporter: asyncio.Task[None] | None = None
        try:
            writer.write(hello(self.name) + OFFSET_REPORT.pack(self.store.max_physical_offset))
            await writer.drain()
            first = await self._handshake(reader, writer)
            # Reports start once the master took the proof: none may come between.
            reporter = asyncio.create_task(self._report_every_heartbeat(writer))
            self.connected = True
            self.error = None
            await self._receive(reader, writer, first)
        finally:
            # Closed before anything is awaited: a stop that cancels this task while it waits
            # for the reporter must not leave the socket to the garbage collector.
            writer.close()
            if reporter is not None:
                reporter.cancel()
                await asyncio.gather(reporter, return_exceptions=True)
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[int, int]:
        """Answer the master's challenge, if it sends one; the first transfer header."""
        offset, size = await self._next_frame(reader)
        if offset != CHALLENGE:
            return offset, size
        if self._key is None:
            raise HARefusedError(
                "its HA port asks for a replication token; this slave has none "
                "(--replication-token: an admin token of the master's auth file)"
            )
        if size != NONCE_BYTES:
            raise ValueError(f"a challenge of {size} bytes; expected {NONCE_BYTES}")
        nonce = await reader.readexactly(size)
        writer.write(proof(self._key, nonce, self.name))
        await writer.drain()
        return await self._next_frame(reader)

    async def _receive(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        first: tuple[int, int],
    ) -> None:
        store = self.store
        offset, size = first
        while True:
            if size:  # not a heartbeat
                async with self._unless_silent():
                    data = await reader.readexactly(size)
                try:
                    end = store.append_replicated(offset, data)
                except ReplicaAppendError as exc:
                    raise ValueError(str(exc)) from exc
                self._adopt_epochs()
                writer.write(OFFSET_REPORT.pack(end))
                await writer.drain()
            offset, size = await self._next_frame(reader)

    async def _next_frame(self, reader: asyncio.StreamReader) -> tuple[int, int]:
        async with self._unless_silent():
            return await _read_frame_header(reader)

    @contextlib.asynccontextmanager
    async def _unless_silent(self) -> AsyncIterator[None]:
        """A read the master answers within ``silence_s``; else ConnectionError (the
        connection is dropped and tried again)."""
        try:
            async with asyncio.timeout(self.silence_s):
                yield
        except TimeoutError:
            raise ConnectionError(
                f"the master sent nothing, not even a heartbeat, for {self.silence_s:g} s"
            ) from None

    async def _report_every_heartbeat(self, writer: asyncio.StreamWriter) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            writer.write(OFFSET_REPORT.pack(self.store.max_physical_offset))
            await writer.drain()

    def _adopt_epochs(self) -> None:
        """Take the master's epochs that start at or below this log's end as this log's own."""
        max_offset = self.store.max_physical_offset
        covered = [e for e in self._remote_epochs if e.start_offset <= max_offset]
        if (
            len(covered) > len(self.epochs.entries)
            or tuple(covered) != self.epochs.entries[: len(covered)]
        ):
            self.epochs.replace(covered)


async def _read_frame_header(reader: asyncio.StreamReader) -> tuple[int, int]:
    """The next frame's (offset, size); HARefusedError for the master's refusal."""
    offset, size = TRANSFER_HEADER.unpack(await reader.readexactly(TRANSFER_HEADER.size))
    if offset == REFUSED:
        reason = await reader.readexactly(min(max(size, 0), MAX_REASON_BYTES))
        raise HARefusedError(reason.decode(errors="replace"))
    if offset < 0 and offset != CHALLENGE:
        raise ValueError(f"an HA frame at offset {offset}")
    return int(offset), int(size)
