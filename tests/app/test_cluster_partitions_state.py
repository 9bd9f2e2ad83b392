"""Timer and transaction state across a network partition: the master of a sync pair cut off
from etcd and its slave (the proxy and the clients still reach it), each broker, etcd and the
proxy in a network namespace of its own (:mod:`tests.app.partition_support`).

- **Timers.** Timer messages scheduled on the master before the cut — one due before it, one
  due while the cut-off master still runs its wheel alone, one due after the failover — are
  each delivered exactly once by the group: the copy the cut-off master puts alone is cut
  when it rejoins as a slave, and the new master delivers what it has not seen delivered.
  Twice: the second time the master cut off is the first's successor, and the broker that
  takes over is the first's cut-off master, with the wheel files it left then.
- **Transactions.** A half stored on the master before the cut is never ended both ways: the
  cut-off master refuses to decide an end its slave cannot confirm (503
  TRANSACTION_END_UNREPLICATED, retried the same way, the other way refused there), while
  the new master ends it — rolled back by an operator, or by its producer answering the new
  master's check-back. After healing the group says rolled back and the message was never
  delivered. An end made before the cut stands on the new master.

One deployment serves both tests, healed and settled in between. Needs root (namespaces).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.cluster.labels import HANDLE_SEPARATOR
from tests.app.partition_support import (
    TIMER_PRECISION_MS,
    TOPIC,
    Deployment,
    deployment,
    settle,
)
from tests.netns import root_skip_reason

SKIP = root_skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")

PG = {"producer_group": "pg-parted"}
UNDECIDED = "TRANSACTION_END_UNREPLICATED"
SETTLING = {"NO_MASTER", "NOT_MASTER", "BROKER_UNAVAILABLE", UNDECIDED}
"""What a new master answers an end while it takes over and publishes its in-sync set."""


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with deployment(tmp_path_factory.mktemp("partition-state"), "sync") as deployed:
        yield deployed


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def cut_off(deployed: Deployment, master: str, slave: str) -> None:
    """Cut ``master`` off from etcd and ``slave``; wait until ``slave`` is master."""
    deployed.net.isolate(master, ["etcd", slave])
    deployed.wait(lambda: deployed.role(slave) == "master", 60)


# ==================================================================== timers


def schedule(deployed: Deployment, broker: str, due: dict[str, int]) -> None:
    batch = [{"body": body, "deliver_at": at} for body, at in due.items()]
    answer = deployed.post(broker, f"/v1/topics/{TOPIC}/messages", {"messages": batch})
    assert answer.status_code == 201, answer.text
    statuses = {m["status"] for m in answer.json()["messages"]}
    assert statuses == {"PUT_OK"}, statuses  # on the slave too, before the cut


def delivered(deployed: Deployment, node: str, bodies: set[str]) -> Counter[str]:
    """How often each of ``bodies`` is in the topic as ``node`` serves it."""
    return Counter(m["body"] for m in deployed.stored_messages(node) if m["body"] in bodies)


@pytest.mark.parametrize("round_no", [1, 2])
def test_timers_scheduled_on_a_master_then_cut_off_are_delivered_once(
    deployed: Deployment, round_no: int
) -> None:
    """The second round cuts off the first round's new master: the broker cut off in the
    first, a slave since, is master again and runs the timer wheel it left then."""
    master, slave = settle(deployed)
    tag = f"timer{round_no}-{now_ms()}"
    now = now_ms()
    due = {f"{tag}-before": now + 500, f"{tag}-alone": now + 2500, f"{tag}-after": now + 8000}
    schedule(deployed, master, due)
    before = {f"{tag}-before"}
    deployed.wait(lambda: delivered(deployed, master, before) == Counter(before), 60)

    cut_at = now_ms()
    cut_off(deployed, master, slave)
    fired_alone = {  # its wheel runs on: copies stored there alone
        m["body"]: m["store_timestamp"] - cut_at
        for m in deployed.stored_messages(master)
        if m["body"] in due and m["store_timestamp"] > cut_at
    }
    deployed.wait(lambda: now_ms() > max(due.values()) + TIMER_PRECISION_MS, 60)
    deployed.wait(lambda: set(delivered(deployed, slave, set(due))) == set(due), 60)

    settled, _ = settle(deployed)
    assert settled == slave
    messages = [m for m in deployed.stored_messages("proxy") if m["body"] in due]
    assert Counter(m["body"] for m in messages) == Counter(set(due)), messages
    for message in messages:  # never before its time
        assert message["store_timestamp"] >= due[message["body"]] - TIMER_PRECISION_MS
    print(f"timers: put by the cut-off master alone (ms after the cut), then cut: {fired_alone}")


# ==================================================================== transactions


def half(deployed: Deployment, broker: str, body: str) -> str:
    answer = deployed.post(
        broker, f"/v1/topics/{TOPIC}/transactions", {**PG, "message": {"body": body}}
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["transaction_id"])


def end(deployed: Deployment, broker: str, transaction_id: str, how: str) -> httpx.Response:
    return deployed.post(broker, f"/v1/transactions/{transaction_id}/{how}", PG)


def code(answer: httpx.Response) -> str:
    try:
        return str(answer.json().get("code", ""))
    except ValueError:
        return ""


def end_retried(deployed: Deployment, broker: str, transaction_id: str, how: str) -> dict[str, Any]:
    """End on ``broker``, retried while it takes over (or publishes its in-sync set); its
    200 answer."""
    answers: list[httpx.Response] = []

    def ended() -> bool:
        answers.append(end(deployed, broker, transaction_id, how))
        last = answers[-1]
        assert last.status_code == 200 or code(last) in SETTLING, last.text
        return last.status_code == 200

    deployed.wait(ended, 60)
    return dict(answers[-1].json())


def checked_back(deployed: Deployment, broker: str, transaction_id: str) -> bool:
    """``broker`` offers ``transaction_id`` to its producer group's check poll."""
    answer = deployed.post(
        broker,
        f"/v1/producer-groups/{PG['producer_group']}/transaction-checks",
        {"wait_ms": 1000, "lease_ms": 5000},
    )
    if answer.status_code != 200:
        return False
    return transaction_id in {c["transaction_id"] for c in answer.json()["checks"]}


def assert_refused_undecided(answer: httpx.Response) -> None:
    assert answer.status_code == 503 and code(answer) == UNDECIDED, answer.text


def test_a_transaction_ended_on_one_side_of_a_partition_is_never_ended_the_other_way(
    deployed: Deployment,
) -> None:
    master, slave = settle(deployed)
    tag = f"tx-{now_ms()}"
    committed_before = half(deployed, master, f"{tag}-committed-before")
    by_operator = half(deployed, master, f"{tag}-operator")
    by_check = half(deployed, master, f"{tag}-check")
    assert end(deployed, master, committed_before, "commit").status_code == 200

    deployed.net.isolate(master, ["etcd", slave])
    # The cut-off master commits, but cannot have its slave confirm it: not decided.
    assert_refused_undecided(end(deployed, master, by_operator, "commit"))
    deployed.wait(lambda: deployed.role(slave) == "master", 60)

    # The new master never saw that commit: an operator rolls the transaction back there.
    rolled = end_retried(deployed, slave, by_operator, "rollback")
    assert rolled["state"] == "rolled_back"
    # The old master still refuses both ways: the same end undecided, the other one ended.
    assert_refused_undecided(end(deployed, master, by_operator, "commit"))
    assert end(deployed, master, by_operator, "rollback").status_code == 409

    # The new master's check-back asks the producer, which rolls back; the old master's
    # commit of it meanwhile is refused.
    assert_refused_undecided(end(deployed, master, by_check, "commit"))
    deployed.wait(lambda: checked_back(deployed, slave, by_check), 60)
    assert end_retried(deployed, slave, by_check, "rollback")["state"] == "rolled_back"

    # What was ended before the cut stands on the new master.
    again = end_retried(deployed, slave, committed_before, "commit")
    assert again["repeated"] is True
    assert end(deployed, slave, committed_before, "rollback").status_code == 409

    settled, _ = settle(deployed)
    assert settled == slave
    for transaction_id in (by_operator, by_check):
        answer = end(deployed, "proxy", f"g1{HANDLE_SEPARATOR}{transaction_id}", "commit")
        assert answer.status_code == 409, answer.text
        shown = deployed.get(settled, f"/v1/transactions/{transaction_id}")
        assert shown.get("state") == "rolled_back", shown
    bodies = Counter(m["body"] for m in deployed.stored_messages("proxy"))
    assert bodies[f"{tag}-committed-before"] == 1
    assert bodies[f"{tag}-operator"] == 0 and bodies[f"{tag}-check"] == 0


def test_ends_decided_on_a_lone_master_stand(deployed: Deployment) -> None:
    """A master whose slave is gone and that has told etcd so (its in-sync set names no
    slave) decides ends alone: no other broker may be elected in its place."""
    master, slave = settle(deployed)
    transaction_id = half(deployed, master, f"lone-{now_ms()}")
    deployed.processes[slave].stop()
    try:
        ended = end_retried(deployed, master, transaction_id, "commit")
        assert ended["state"] == "committed"
    finally:
        deployed.restart_if_exited(slave)
    settle(deployed)
