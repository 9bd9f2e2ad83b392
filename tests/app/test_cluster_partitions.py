"""Network partitions against a broker group: etcd, a master and its slave and the proxy, each
in a network namespace of its own (:mod:`tests.netns`), producers sending through the proxy and
straight to each broker with Idempotency-Keys, then every queue drained.

The nemeses: the master cut off from etcd and its slave while the proxy and the clients still
reach it (sync and async replication), the slave cut off, etcd cut off from everyone, and the
master's links flapping. Checked after each: no PUT_OK lost (async: none but what the cut-off
master acknowledged in its old epoch before it stopped), nothing stored twice for one key, never
two brokers acknowledging in one epoch, and the cut-off master's last PUT_OK before the new
master's first acknowledgement. ``bench/partition_soak.py`` runs the same nemeses longer and
prints the times. Needs root (namespaces): skipped, saying why, without it.

One deployment per replication mode serves every test of this module, in turn: each starts
by healing and settling the group (:func:`~tests.app.partition_support.settle`) and cuts
whichever broker is master then; the producers' bodies carry the test's tag.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.app.partition_support import (
    LEASE_TTL_S,
    Deployment,
    Ledger,
    Outcome,
    Producers,
    check_invariants,
    deployment,
    outcome,
    settle,
    timings,
)
from tests.netns import bpf_loss_available, netem_available, root_skip_reason

SKIP = root_skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

FLAPS = 3
LOSSY_SENDS = 300
"""Sends answered while the master's link drops packets."""
NETEM = netem_available()
BPF_LOSS = bpf_loss_available()


@pytest.fixture(scope="module", params=["sync"])
def deployed(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    scratch = tmp_path_factory.mktemp(f"partitions-{request.param}")
    with deployment(scratch, request.param) as deployed:
        yield deployed


def producing(deployed: Deployment, ledger: Ledger, tag: str) -> Producers:
    """Producers whose bodies start with ``tag`` and the time (a repeated run on the same
    deployment sends new bodies), once 20 sends are answered."""
    producers = Producers(deployed, ledger, tag=f"{tag}-{time.time_ns()}").start()
    grown = ledger.count() + 20
    deployed.wait(lambda: ledger.count() > grown)
    return producers


def settle_and_drain(deployed: Deployment, producers: Producers, ledger: Ledger) -> Outcome:
    """Heal, let a fenced old master rejoin as a slave, see the producers answered again,
    stop them, drain every queue."""
    master, slave = settle(deployed)
    grown = ledger.count() + 20
    deployed.wait(lambda: ledger.count() > grown)
    producers.stop()
    deployed.wait(lambda: deployed.in_sync(master, slave), 90)
    return outcome(ledger, deployed.stored_bodies())


def isolate_master(
    deployed: Deployment, ledger: Ledger, tag: str
) -> tuple[Outcome, str, int, float]:
    """Cut the master off from etcd and its slave (the proxy and clients still reach it)
    until the slave is master and has acknowledged; heal; the outcome, the cut-off master,
    its epoch and the cut's time."""
    master, slave = settle(deployed)
    producers = producing(deployed, ledger, tag)
    epoch = int(deployed.get(master, "/v1/replication")["epoch"])
    cut_at = time.monotonic()
    deployed.net.isolate(master, ["etcd", slave])
    deployed.wait(lambda: deployed.role(slave) == "master", 60)
    deployed.wait(lambda: any(a.broker == slave for a in ledger.acks if a.at > cut_at), 60)
    result = settle_and_drain(deployed, producers, ledger)
    result.stop_acking_s, result.failover_s = timings(ledger, master, cut_at)
    print(result.line(f"isolated master ({deployed.replication})"))
    return result, master, epoch, cut_at


def assert_no_overlap(result: Outcome) -> None:
    assert result.failover_s is not None, "the new master never acknowledged"
    if result.stop_acking_s is not None:
        assert result.stop_acking_s < result.failover_s


# Those that leave the master in place first; then those that fence it.


def test_a_slave_cut_off_loses_nothing_and_catches_up(deployed: Deployment) -> None:
    master, slave = settle(deployed)
    ledger = Ledger()
    producers = producing(deployed, ledger, "slave-cut")
    deployed.net.isolate(slave, ["etcd", master, "proxy", "client"])
    deployed.wait(lambda: not deployed.in_sync(master, slave), 60)
    grown = ledger.count() + 20
    deployed.wait(lambda: ledger.count() > grown)
    result = settle_and_drain(deployed, producers, ledger)
    print(result.line("isolated slave"))
    check_invariants(result)
    assert deployed.master_of_proxy() == master


def test_etcd_cut_off_from_everyone_elects_nobody_and_loses_nothing(
    deployed: Deployment,
) -> None:
    _, slave = settle(deployed)
    ledger = Ledger()
    producers = producing(deployed, ledger, "etcd-cut")
    deployed.net.isolate("etcd", ["g1-a", "g1-b", "proxy"])
    time.sleep(2 * LEASE_TTL_S)  # past the lease TTL: nothing is renewed meanwhile
    assert deployed.role(slave) == "slave"
    result = settle_and_drain(deployed, producers, ledger)
    print(result.line("isolated etcd"))
    check_invariants(result)


@pytest.mark.skipif(
    not NETEM and not BPF_LOSS, reason="the kernel has neither sch_netem nor cls_bpf: no loss"
)
def test_a_slow_lossy_master_link_loses_nothing(deployed: Deployment) -> None:
    """100 ms +- 50 ms and 5 % loss both ways with sch_netem; without it 5 % loss alone
    (cls_bpf), and no delay."""
    master, _ = settle(deployed)
    ledger = Ledger()
    producers = producing(deployed, ledger, "lossy")
    if NETEM:
        deployed.net.netem(master, delay_ms=100, jitter_ms=50, loss_percent=5)
    else:
        deployed.net.lose(master, loss_percent=5)
    try:
        grown = ledger.count() + LOSSY_SENDS
        deployed.wait(lambda: ledger.count() > grown, 120)
    finally:
        deployed.net.clear_netem(master)
        deployed.net.clear_loss(master)
    result = settle_and_drain(deployed, producers, ledger)
    print(result.line("100 ms +- 50 ms, 5 % loss" if NETEM else "5 % loss (no delay)"))
    check_invariants(result)


def test_a_sync_master_cut_off_from_etcd_and_its_slave_loses_no_acknowledged_message(
    deployed: Deployment,
) -> None:
    ledger = Ledger()
    result, _, _, _ = isolate_master(deployed, ledger, "master-cut")
    check_invariants(result)
    assert_no_overlap(result)


def test_the_master_links_flapping_lose_nothing_and_store_nothing_twice(
    deployed: Deployment,
) -> None:
    settle(deployed)
    ledger = Ledger()
    producers = producing(deployed, ledger, "flapping")
    for _ in range(FLAPS):
        master = deployed.master_of_proxy() or "g1-a"
        slave = "g1-b" if master == "g1-a" else "g1-a"
        deployed.net.isolate(master, ["etcd", slave])
        time.sleep(1.5)
        deployed.net.heal_all()
        time.sleep(2.5)
        for name in ("g1-a", "g1-b"):
            deployed.restart_if_exited(name)
    result = settle_and_drain(deployed, producers, ledger)
    print(result.line("flapping master links"))
    check_invariants(result)


@pytest.mark.parametrize("deployed", ["async"], indirect=True)
def test_an_async_master_cut_off_stops_acknowledging_before_its_successor_starts(
    deployed: Deployment,
) -> None:
    """Async replication loses what the cut-off master acknowledged and never shipped; the
    lease fence bounds that to its old epoch's last moments: nothing acknowledged after its
    successor began, nothing of any other epoch."""
    ledger = Ledger()
    result, _, old_epoch, cut_at = isolate_master(deployed, ledger, "async-master-cut")
    assert_no_overlap(result)
    lost_window = {a.body for a in ledger.acks if a.epoch == old_epoch and a.at > cut_at}
    assert result.lost <= lost_window
    check_invariants(Outcome(**{**vars(result), "lost": set()}))
