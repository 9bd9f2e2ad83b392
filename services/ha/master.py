"""The master's HA server (RocketMQ's HAService and HAConnection) and its sync-state set.

Each slave connection streams the CommitLog from the offset the slave reports: a header and
up to 32 KiB of raw bytes a batch, as fast as the slave drains them. When the slave has
everything the connection sleeps until the next append wakes it (``appended``, called by
the one put path), sending a heartbeat when idle. The slave's reports are its acked offset.

A slave is **in sync** (RocketMQ 5's SyncStateSet) while it is connected, at most
``max_gap_bytes`` behind, and caught up (its report covered everything the master had at
its previous report) within the last ``catch_up_window_s``. Listeners hear every change of
the set; :class:`~services.ha.group_transfer.GroupTransferService` waits on acks.

With ``accepted_keys`` (a master with an auth file) a slave proves it holds a replication
token before any byte of the CommitLog goes out (:mod:`services.ha.auth`); without them every
slave that reaches the port streams. With ``tls`` the port speaks TLS and takes only slaves
whose certificate its CA signed.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.ha.address import split_host_port
from services.ha.auth import check_proof, new_nonce
from services.ha.protocol import (
    PROOF_BYTES,
    PROOF_TIMEOUT_S,
    TRANSFER_HEADER,
    challenge,
    read_hello,
    read_offset,
    refusal,
)
from services.ha.status import SlaveStatus
from services.tls import TlsConfig
from storage import MessageStore
from storage.commit_log import ReplicaAppendError

log = logging.getLogger(__name__)

SyncStateListener = Callable[[frozenset[str]], None]
_TIMELINE_KEEP = 4096


@dataclass(eq=False)
class _Connection:
    """One slave's connection: what it acked and when it last caught up."""

    name: str
    acked: int = -1
    master_max_at_last_ack: int = 0
    last_caught_up: float = 0.0
    closed: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class HAService:
    """Streams the CommitLog to slaves; tracks their acks and the sync-state set."""

    def __init__(
        self,
        store: MessageStore,
        listen: str,
        *,
        max_gap_bytes: int = 256 * 1024 * 1024,
        catch_up_window_s: float = 15.0,
        heartbeat_s: float = 1.0,
        accepted_keys: frozenset[bytes] | None = None,
        tls: TlsConfig | None = None,
        proof_timeout_s: float = PROOF_TIMEOUT_S,
    ) -> None:
        self.store = store
        self.listen = listen
        self.accepted_keys = accepted_keys  # None: no auth file, every slave streams
        self.tls = tls if tls is not None and tls.serves else None
        self.proof_timeout_s = proof_timeout_s
        self.max_gap_bytes = max_gap_bytes
        self.catch_up_window_s = catch_up_window_s
        self.heartbeat_s = heartbeat_s
        self.address: str | None = None
        self.sync_state_listeners: list[SyncStateListener] = []
        self.ack_listeners: list[Callable[[], None]] = []
        self._connections: set[_Connection] = set()
        self._sync_state: frozenset[str] = frozenset()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._expiry: asyncio.TimerHandle | None = None
        # (end offset, store time) of recent puts: how old a slave's last message is.
        self._timeline_ends: list[int] = []
        self._timeline_times: list[int] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        """Listen on ``listen`` (port 0: any free port); the address actually bound."""
        host, port = split_host_port(self.listen)
        context = self.tls.server_context(require_client_cert=True) if self.tls else None
        self._server = await asyncio.start_server(self._serve, host, port, ssl=context)
        bound = self._server.sockets[0].getsockname()
        self.address = f"{host}:{bound[1]}"
        self._arm_expiry()
        log.info(
            "HA service listening on %s (%s, %s)",
            self.address,
            "TLS" if context else "plain TCP",
            "slaves prove a replication token" if self.accepted_keys is not None else "open",
        )
        return self.address

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for connection in self._connections:
            connection.closed = True
            connection.wake.set()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 5)
        self._set_sync_state(frozenset())

    # ------------------------------------------------------------------ the put path

    def appended(self, end_offset: int, store_timestamp: int) -> None:
        """A put reached ``end_offset``: wake every connection (on the loop thread)."""
        self._timeline_ends.append(end_offset)
        self._timeline_times.append(store_timestamp)
        for connection in self._connections:
            connection.wake.set()

    @property
    def sync_state_set(self) -> frozenset[str]:
        return self._sync_state

    def confirmed_offset(self) -> int:
        """The offset every in-sync slave has acked; -1 when none is in sync."""
        acks = [c.acked for c in self._connections if c.name in self._sync_state]
        return min(acks) if acks else -1

    def slaves(self) -> tuple[SlaveStatus, ...]:
        master_max = self.store.max_physical_offset
        master_time = self.store.last_store_timestamp
        statuses = []
        for connection in sorted(self._connections, key=lambda c: c.name):
            acked = max(connection.acked, 0)
            lag = max(0, master_max - acked)
            statuses.append(
                SlaveStatus(
                    connection.name,
                    acked,
                    lag,
                    0.0 if lag == 0 else self._lag_seconds(acked, master_time),
                    connection.name in self._sync_state,
                )
            )
        return tuple(statuses)

    def _lag_seconds(self, acked: int, master_time: int) -> float | None:
        index = bisect.bisect_right(self._timeline_ends, acked) - 1
        if index < 0 or not master_time:
            return None
        return max(0, master_time - self._timeline_times[index]) / 1000

    # ------------------------------------------------------------------ one slave

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._server is None:  # accepted just before stop(), which could not cancel it
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        connection: _Connection | None = None
        try:
            # A silent peer holds no connection open for long (a TimeoutError is an OSError).
            name, reported = await asyncio.wait_for(_read_greeting(reader), self.proof_timeout_s)
            if not await self._authenticate(name, reader, writer):
                return
            try:
                start = self._start_offset(name, reported)
            except ReplicaAppendError as exc:
                await _refuse(writer, str(exc))
                raise
            connection = _Connection(name, master_max_at_last_ack=self.store.max_physical_offset)
            self._connections.add(connection)
            self._on_report(connection, reported)
            reports = asyncio.create_task(self._read_reports(connection, reader))
            try:
                await self._transfer(connection, writer, start)
            finally:
                reports.cancel()
                await asyncio.gather(reports, return_exceptions=True)
        except (OSError, asyncio.IncompleteReadError, ReplicaAppendError) as exc:
            log.info("HA connection from %s ended: %s", connection and connection.name, exc)
        finally:
            self._tasks.discard(task)
            if connection is not None:
                self._connections.discard(connection)
                self._evaluate()
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _authenticate(
        self, name: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Challenge the slave for its proof (when this master has an auth file); False,
        the reason sent and logged, when it gives none that matches."""
        if self.accepted_keys is None:
            return True
        nonce = new_nonce()
        writer.write(challenge(nonce))
        await writer.drain()
        try:
            answer = await asyncio.wait_for(reader.readexactly(PROOF_BYTES), self.proof_timeout_s)
        except TimeoutError:
            reason = f"no proof of a replication token within {self.proof_timeout_s:g} s"
        except asyncio.IncompleteReadError:
            reason = "the connection closed before a proof of a replication token"
        else:
            if check_proof(answer, nonce, name, self.accepted_keys):
                return True
            reason = "the proof matches no admin token of this master's auth file"
        peer = writer.get_extra_info("peername")
        log.warning("HA connection of slave %r from %s refused: %s", name, peer, reason)
        await _refuse(writer, reason)
        return False

    def _start_offset(self, name: str, reported: int) -> int:
        store = self.store
        if reported > store.max_physical_offset:
            raise ReplicaAppendError(
                f"slave {name} reports offset {reported}, past this master's end "
                f"{store.max_physical_offset}: it must truncate before it replicates"
            )
        start = store.replication_start(reported)
        if start < store.min_physical_offset:
            raise ReplicaAppendError(
                f"slave {name} is at {start}, before this master's oldest data "
                f"({store.min_physical_offset})"
            )
        return start

    async def _read_reports(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                self._on_report(connection, await read_offset(reader))
        finally:
            connection.closed = True
            connection.wake.set()

    async def _transfer(
        self, connection: _Connection, writer: asyncio.StreamWriter, start: int
    ) -> None:
        """Send the CommitLog from ``start`` on; sleep until woken when the slave has it all."""
        store = self.store
        offset = start
        wake = connection.wake
        while not connection.closed:
            data = store.read_replication_chunk(offset)
            if data:
                writer.write(TRANSFER_HEADER.pack(offset, len(data)) + data)
                offset += len(data)
                await writer.drain()
                continue
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), self.heartbeat_s)
            except TimeoutError:
                writer.write(TRANSFER_HEADER.pack(offset, 0))
                await writer.drain()

    # ------------------------------------------------------------------ acks and the set

    def _on_report(self, connection: _Connection, offset: int) -> None:
        master_max = self.store.max_physical_offset
        if offset >= connection.master_max_at_last_ack:
            connection.last_caught_up = time.monotonic()
        connection.acked = offset
        connection.master_max_at_last_ack = master_max
        self._evaluate()
        for listener in self.ack_listeners:
            listener()

    def _evaluate(self) -> None:
        """Recompute the sync-state set; tell the listeners when it changed."""
        master_max = self.store.max_physical_offset
        now = time.monotonic()
        in_sync = frozenset(
            c.name
            for c in self._connections
            if not c.closed
            and c.acked >= 0
            and master_max - c.acked <= self.max_gap_bytes
            and now - c.last_caught_up <= self.catch_up_window_s
        )
        self._trim_timeline()
        self._set_sync_state(in_sync)

    def _set_sync_state(self, in_sync: frozenset[str]) -> None:
        if in_sync == self._sync_state:
            return
        log.info("sync-state set is now %s", sorted(in_sync))
        self._sync_state = in_sync
        for listener in list(self.sync_state_listeners):
            try:
                listener(in_sync)
            except Exception:
                log.exception("a sync-state listener failed")
        for ack_listener in self.ack_listeners:
            ack_listener()

    def _arm_expiry(self) -> None:
        """Re-check the set every second: a silent slave drops out after the window."""

        def tick() -> None:
            self._evaluate()
            self._arm_expiry()

        self._expiry = asyncio.get_running_loop().call_later(1.0, tick)

    def _trim_timeline(self) -> None:
        ends = self._timeline_ends
        if len(ends) <= 2 * _TIMELINE_KEEP:
            return
        acks = [c.acked for c in self._connections if c.acked >= 0]
        floor = min(acks) if acks else ends[-1]
        keep_from = min(max(0, bisect.bisect_right(ends, floor) - 1), len(ends) - _TIMELINE_KEEP)
        del ends[:keep_from]
        del self._timeline_times[:keep_from]


async def _read_greeting(reader: asyncio.StreamReader) -> tuple[str, int]:
    """The slave's name and its first report."""
    return await read_hello(reader), await read_offset(reader)


async def _refuse(writer: asyncio.StreamWriter, reason: str) -> None:
    """Tell the slave why it is refused, as the connection's last frame."""
    writer.write(refusal(reason))
    with contextlib.suppress(OSError):
        await writer.drain()
