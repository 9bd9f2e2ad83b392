"""A broker's lease heartbeat: its etcd lease renewed from a thread of its own, while the
broker's event loop is alive.

Why a thread: an HTTP call made on the event loop needs several turns of the loop (about
seven with httpx: connect, write, read callbacks), and each turn waits behind every ready
callback. A broker busy serving — 16 POP consumers make a turn last a fifth of a second — then
renews its lease late, the lease lapses, and its group fails over (or is left without a master)
for load alone. The thread's blocking call needs no turn of the loop at all.

Why a guard: a thread alone would keep the lease of a broker whose loop is stuck for good, and
its master key with it, so that no slave would ever take over. Each beat therefore posts a
probe to the loop and renews only while the loop has run a probe within ``loop_stall_limit_s``
(less than the TTL): a stuck loop still loses its lease. RocketMQ's broker sends its controller
heartbeat the same way, from an executor of its own (``brokerHeartbeatExecutorService``), and
the controller drops a broker whose heartbeats stop.

The thread decides nothing: when etcd answers that the lease is gone it grants a new one (the
broker stays registered) and hands it to the loop, which keeps or yields the master key.

Why a fence: a loop stuck past the TTL may have lost its master key to a slave by the time it
runs again, and the requests queued behind the stall are served before the loop learns of the
loss. The heartbeat therefore records when etcd last confirmed the lease (the send time of the
renewal that found it alive: etcd counts the TTL from a later moment), and
:meth:`LeaseHeartbeat.lease_current` answers whether that is less than a TTL ago — the role
refuses writes otherwise.

Why the fence depends on the replication: an etcd that cannot be reached looks the same to a
master whether etcd is down for everyone or this master alone is cut off from it — and in the
second case its lease lapses on etcd, a slave is elected and acknowledges writes of its own.
With sync replication a PUT_OK needs an in-sync slave's ack, and a slave stops acking once it
is promoted, so nothing the old master acknowledges is lost: it keeps serving while etcd is out
of reach (as RocketMQ's master does when its controller is away), and an unanswered try counts
as a confirmation. With async replication nothing else stops a cut-off master: an unanswered
try confirms nothing, so the master stops acknowledging at most a TTL after etcd last
answered — before its lease can lapse on etcd, so before a successor can be elected
(``serve_through_etcd_outage=False``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from services.cluster.etcd import EtcdLeaseClient
from services.errors import EtcdUnavailableError

log = logging.getLogger(__name__)

LeaseLostHook = Callable[[int], None]
"""Called on the event loop with the new lease once the old one is found gone."""


class LeaseHeartbeat:
    """Renews one lease every TTL/3 from a daemon thread, while the event loop answers."""

    def __init__(
        self,
        etcd: EtcdLeaseClient,
        ttl_s: int,
        on_lost: LeaseLostHook,
        loop_stall_limit_s: float | None = None,
        serve_through_etcd_outage: bool = True,
    ) -> None:
        self.etcd = etcd
        self.serve_through_etcd_outage = serve_through_etcd_outage
        self.ttl_s = ttl_s
        self.on_lost = on_lost
        self.interval_s = max(ttl_s / 3, 0.2)
        self.loop_stall_limit_s = loop_stall_limit_s or ttl_s * 2 / 3
        self.lease = 0
        self._confirmed_at = float("-inf")  # monotonic time etcd last confirmed the lease
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_seen = 0.0  # monotonic time the loop last ran a probe
        self._probe_pending = False
        self._stalled = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, lease: int, granted_at: float) -> None:
        """Keep ``lease`` alive from now on; called on the event loop it watches.
        ``granted_at``: the monotonic time the grant of ``lease`` was asked for."""
        self.lease = lease
        self._confirmed_at = granted_at
        self._loop = asyncio.get_running_loop()
        self._loop_seen = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name="cluster-lease-heartbeat", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and close the client (blocks until the thread ends: call it off the
        loop)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.etcd.close()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                self.beat()
            except Exception:
                log.exception("cluster lease renewal failed")

    def beat(self) -> None:
        """One renewal, if the loop is alive; a new lease handed to the loop if it lapsed."""
        alive = self._loop_alive()
        self._probe()
        if not alive:
            return
        sent_at = time.monotonic()
        try:
            if self.etcd.keep_alive(self.lease) <= 0:
                self._replace_lease()
                return
        except EtcdUnavailableError as exc:
            log.warning("etcd unreachable (%s); the lease is renewed when it answers", exc)
            if not self.serve_through_etcd_outage:
                return  # unconfirmed: writes stop once the last confirmation is a TTL old
            sent_at = time.monotonic()
        self._confirmed_at = sent_at

    def confirmed(self, asked_at: float) -> None:
        """etcd accepted a request on the lease that was sent at ``asked_at`` (monotonic)."""
        self._confirmed_at = max(self._confirmed_at, asked_at)

    def lease_current(self) -> bool:
        """Whether etcd confirmed the lease less than a TTL ago (or could not be asked, where
        an etcd outage does not stop the master)."""
        return time.monotonic() - self._confirmed_at < self.ttl_s

    def _loop_alive(self) -> bool:
        stalled_s = time.monotonic() - self._loop_seen
        alive = stalled_s <= self.loop_stall_limit_s
        if alive == self._stalled:
            if alive:
                log.warning("the event loop runs again; the lease is renewed again")
            else:
                log.warning("the event loop has not run for %.1f s; the lease may lapse", stalled_s)
        self._stalled = not alive
        return alive

    def _probe(self) -> None:
        """Ask the loop to show it runs; at most one probe waits in it."""
        if self._probe_pending or self._loop is None:
            return
        self._probe_pending = True
        try:
            self._loop.call_soon_threadsafe(self._seen)
        except RuntimeError:  # the loop is closed: the broker is going away
            self._stopping.set()

    def _seen(self) -> None:
        self._loop_seen = time.monotonic()
        self._probe_pending = False

    def _replace_lease(self) -> None:
        lease = self.etcd.grant(self.ttl_s)
        self.lease = lease
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.on_lost, lease)
