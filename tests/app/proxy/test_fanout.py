"""Requests to several broker groups at once (:mod:`app.proxy.fanout`): a consumer's budget
shared out by what each group gave last time (:class:`BudgetShares`), the rounds of a shared-out
request (:func:`share_out`), the long-poll race (:func:`first_non_empty`) and the long-poll in
turn (:func:`long_poll_in_turn`), and the rotation of the groups — over answers made by hand;
tests/app/proxy/test_consume.py and test_pop.py run the same against real brokers."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.proxy import fanout
from app.proxy.fanout import (
    BudgetShares,
    GroupAnswer,
    all_unreachable,
    each_group,
    first_non_empty,
    group_answer,
    long_poll_in_turn,
    rotated,
    share_out,
)
from app.proxy.forward import BrokerAnswer, ProxyError
from services.cluster import NoMasterError, QueueRoute, TopicRoute

# ================================================================ budget shares


def test_budget_shares_follow_what_each_group_gave() -> None:
    shares = BudgetShares(probe_interval_s=0)
    key = ("pull", "G", "T")
    groups = ["g1", "g2", "g3"]
    first = shares.shares(key, groups, 32)
    assert first == {"g1": 11, "g2": 11, "g3": 10}  # nothing known: even
    shares.record(key, first, {"g1": 11, "g2": 0, "g3": 4})
    second = shares.shares(key, groups, 32)
    assert second == {"g1": 30, "g2": 1, "g3": 1}  # g2 and g3 drained: a probe each
    shares.record(key, second, {"g1": 30, "g2": 1, "g3": 0})
    assert shares.shares(key, groups, 32) == {"g1": 16, "g2": 15, "g3": 1}  # g2 has more again
    shares.record(key, {"g1": 16}, {"g1": 3})  # only g1 asked: g2 still full, g3 still drained
    assert shares.shares(key, groups, 32) == {"g1": 1, "g2": 30, "g3": 1}
    shares.record(key, {"g1": 1, "g2": 30, "g3": 1}, {})
    assert shares.shares(key, groups, 32) == {"g1": 11, "g2": 11, "g3": 10}  # all drained
    assert shares.shares(key, groups, 2) == {"g1": 1, "g2": 1, "g3": 0}
    assert sum(shares.shares(("pop", "G", "T"), groups, 1).values()) == 1


def test_drained_groups_are_probed_at_most_once_per_interval() -> None:
    shares = BudgetShares(probe_interval_s=3600)
    key = ("pop", "G", "T")
    shares.record(key, {"g1": 16, "g2": 16}, {"g1": 16, "g2": 0})
    assert shares.shares(key, ["g1", "g2"], 32) == {"g1": 31, "g2": 1}
    assert shares.shares(key, ["g1", "g2"], 32) == {"g1": 32, "g2": 0}
    other = ("pop", "G", "U")  # another topic's probes are its own
    shares.record(other, {"g1": 16, "g2": 16}, {"g1": 16, "g2": 0})
    assert shares.shares(other, ["g1", "g2"], 32) == {"g1": 31, "g2": 1}


def test_budget_shares_forget_the_least_recent_key_first() -> None:
    shares = BudgetShares(capacity=2, probe_interval_s=0)
    for topic in ("A", "B", "C"):
        shares.record(("pull", "G", topic), {"g1": 2, "g2": 2}, {"g1": 2})
    assert shares.shares(("pull", "G", "A"), ["g1", "g2"], 4) == {"g1": 2, "g2": 2}
    assert shares.shares(("pull", "G", "C"), ["g1", "g2"], 4) == {"g1": 3, "g2": 1}


def shares_by_the_rule(
    drained: frozenset[str], probe_due: bool, groups: list[str], budget: int
) -> dict[str, int]:
    """The shares as the rule says them, written plainly: the groups that filled their share
    last time split the budget (evenly, the first ones one more), a drained group gets one
    when its probe is due; when none filled its share, all split it; a budget smaller than the
    groups is one message each for as many as it allows."""
    likely = [g for g in groups if g not in drained]
    probed = [g for g in groups if g in drained]
    if not likely:
        likely, probed = list(groups), []
    if not probe_due:
        probed = []
    shares = dict.fromkeys(groups, 0)
    if budget < len(likely) + len(probed):
        for name in (likely + probed)[:budget]:
            shares[name] = 1
        return shares
    for name in probed:
        shares[name] = 1
    each, extra = divmod(budget - len(probed), len(likely))
    for index, name in enumerate(likely):
        shares[name] = each + (1 if index < extra else 0)
    return shares


ALL = ["g1", "g2", "g3", "g4"]


@given(
    groups=st.permutations(ALL).flatmap(lambda order: st.integers(1, 4).map(lambda n: order[:n])),
    full=st.sets(st.sampled_from(ALL)),
    known=st.booleans(),
    probed_lately=st.booleans(),
    budget=st.integers(-1, 40),
)
def test_budget_shares_are_the_rules(
    groups: list[str], full: set[str], known: bool, probed_lately: bool, budget: int
) -> None:
    """Any groups known drained or not, probed lately or never, in any order, any budget."""
    shares = BudgetShares(probe_interval_s=3600)
    key = ("pull", "G", "T")
    drained: frozenset[str] = frozenset()
    if known:
        asked = dict.fromkeys(ALL, 1)
        shares.record(key, asked, dict.fromkeys(full, 1))
        drained = frozenset(asked) - full
        if probed_lately:
            shares.shares(key, ALL, 40)  # the probe of every drained group: made now
    probed_now = bool(known and probed_lately and drained and full)
    expected = shares_by_the_rule(drained, not probed_now, groups, budget)
    got = shares.shares(key, groups, budget)
    assert got == expected
    if budget >= 1:  # nothing is fetched that is not delivered, and all of it may be
        assert sum(got.values()) == budget


# ================================================================ rounds of a shared-out request

ROUTE = TopicRoute("T", (QueueRoute(0, "g1", 0), QueueRoute(1, "g2", 0), QueueRoute(2, "g3", 0)))


def pulled(count: int, status: int = 200, header: bool = True) -> BrokerAnswer:
    """A group's answer holding ``count`` messages (its count in the broker's header, or
    only in its body)."""
    body: dict[str, Any] = {"messages": [{"body": f"m{i}"} for i in range(count)], "queues": []}
    if status != 200:
        body = {"code": "REFUSED", "status": status}
    return BrokerAnswer(
        status, orjson.dumps(body), "application/json", [], count if header else None
    )


class Groups:
    """Broker groups that answer from a script: ``answers[name]`` is what each round gets
    (the last one again when the script ends); an exception is raised instead."""

    def __init__(self, answers: dict[str, list[BrokerAnswer | Exception]]) -> None:
        self.answers = answers
        self.asked: list[tuple[str, int, int]] = []

    async def ask(self, name: str, share: int, wait_ms: int) -> BrokerAnswer:
        self.asked.append((name, share, wait_ms))
        script = self.answers[name]
        answer = script.pop(0) if len(script) > 1 else script[0]
        await asyncio.sleep(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture(autouse=True)
def rotation_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fanout, "ROTATION", [0])


def unreachable(name: str) -> ProxyError:
    return ProxyError("BROKER_UNAVAILABLE", f"{name} does not answer")


async def test_a_budget_is_shared_out_over_every_group_at_once() -> None:
    groups = Groups({"g1": [pulled(4)], "g2": [pulled(1, header=False)], "g3": [pulled(0)]})
    shares = BudgetShares()
    found = await share_out(shares, "pull", "G", ROUTE, 12, groups.ask)
    assert sorted(groups.asked) == [("g1", 4, 0), ("g2", 4, 0), ("g3", 4, 0)]
    assert [(a.broker_group, a.count) for a in found.answers] == [("g1", 4), ("g2", 1), ("g3", 0)]
    assert (found.found(), found.refused, found.error) == (5, None, None)
    # g2 and g3 gave less than asked: drained; g1 is asked for the rest, they for a probe each
    assert shares.shares(("pull", "G", "T"), ["g1", "g2", "g3"], 12) == {"g1": 10, "g2": 1, "g3": 1}


async def test_a_round_that_finds_nothing_goes_on_to_the_groups_left_and_keeps_both() -> None:
    groups = Groups({"g1": [pulled(0)], "g2": [pulled(0)], "g3": [pulled(2)]})
    found = await share_out(BudgetShares(), "pull", "G", ROUTE, 2, groups.ask)
    assert groups.asked[:2] == [("g1", 1, 0), ("g2", 1, 0)]
    assert groups.asked[2:] == [("g3", 2, 0)]  # the group left, for the whole budget
    assert [(a.broker_group, a.count) for a in found.answers] == [("g1", 0), ("g2", 0), ("g3", 2)]


async def test_a_group_that_does_not_answer_is_not_asked_again() -> None:
    groups = Groups({"g1": [unreachable("g1")], "g2": [pulled(0)], "g3": [pulled(0)]})
    found = await share_out(BudgetShares(), "pop", "G", ROUTE, 1, groups.ask)
    assert [name for name, _, _ in groups.asked] == ["g1", "g2"]  # g1 once, then the rest
    assert [a.broker_group for a in found.answers] == ["g2"]
    assert isinstance(found.error, ProxyError)


async def test_when_no_group_answers_the_error_is_raised() -> None:
    down: dict[str, list[BrokerAnswer | Exception]] = {
        name: [unreachable(name)] for name in ("g1", "g2", "g3")
    }
    with pytest.raises(ProxyError):
        await share_out(BudgetShares(), "pull", "G", ROUTE, 3, Groups(down).ask)
    mixed: dict[str, list[BrokerAnswer | Exception]] = {
        "g1": [NoMasterError("none")],
        "g2": [pulled(0)],
        "g3": [unreachable("g3")],
    }
    found = await share_out(BudgetShares(), "pull", "G", ROUTE, 3, Groups(mixed).ask)
    assert [a.broker_group for a in found.answers] == ["g2"]  # one answered: no error raised


async def test_a_refusal_is_the_answer_only_when_nothing_was_delivered() -> None:
    refusing = Groups({"g1": [pulled(0, status=403)], "g2": [pulled(0)], "g3": [pulled(0)]})
    found = await share_out(BudgetShares(), "pull", "G", ROUTE, 2, refusing.ask)
    assert found.refused is not None and found.refused.status == 403
    assert [name for name, _, _ in refusing.asked] == ["g1", "g2"]  # g3 is not asked after it
    delivering = Groups({"g1": [pulled(0, status=403)], "g2": [pulled(1)], "g3": [pulled(0)]})
    found = await share_out(BudgetShares(), "pull", "G", ROUTE, 3, delivering.ask)
    assert found.refused is None and found.found() == 1  # what g2 committed is answered


async def test_the_groups_start_one_further_on_with_every_request() -> None:
    assert [rotated(["g1", "g2", "g3"]) for _ in range(4)] == [
        ["g1", "g2", "g3"],
        ["g2", "g3", "g1"],
        ["g3", "g1", "g2"],
        ["g1", "g2", "g3"],
    ]
    assert rotated([]) == []
    groups = Groups({name: [pulled(1)] for name in ("g1", "g2", "g3")})
    await share_out(BudgetShares(), "pull", "G", ROUTE, 4, groups.ask)
    assert groups.asked == [("g2", 2, 0), ("g3", 1, 0), ("g1", 1, 0)]  # the odd one: g2


# ================================================================ the long-poll race and its parts


async def test_the_first_answer_with_messages_wins_and_the_others_are_cancelled() -> None:
    cancelled: list[str] = []
    release = asyncio.Event()

    async def ask(name: str) -> BrokerAnswer:
        try:
            if name == "slow":
                await release.wait()
            if name == "down":
                raise unreachable(name)
            return pulled(0 if name == "empty" else 2)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    winner = await first_non_empty(["slow", "down", "empty", "full"], ask)
    assert winner is not None and (winner.broker_group, winner.count) == ("full", 2)
    assert cancelled == ["slow"]
    nothing = await first_non_empty(["down", "empty"], ask)
    assert nothing is None
    refused = await first_non_empty(["x"], lambda name: _answer(pulled(0, status=409)))
    assert refused is None


async def _answer(answer: BrokerAnswer) -> BrokerAnswer:
    return answer


async def test_each_group_is_asked_at_once_and_an_unreachable_one_kept_as_its_error() -> None:
    started: list[str] = []
    both = asyncio.Event()

    async def ask(name: str) -> str:
        started.append(name)
        if len(started) == 2:
            both.set()
        await both.wait()  # each waits for the other: only asked at once do they both end
        if name == "g2":
            raise NoMasterError("no master")
        return name.upper()

    answers = await asyncio.wait_for(each_group(["g1", "g2"], ask), 10)
    assert answers[0] == ("g1", "G1")
    assert isinstance(answers[1][1], NoMasterError)
    assert all_unreachable(answers) is None
    alone = await each_group(["g2"], ask)
    assert isinstance(alone[0][1], NoMasterError)
    assert all_unreachable(alone) is alone[0][1]


def test_a_groups_messages_are_counted_by_its_header_else_its_body() -> None:
    assert group_answer("g1", pulled(3)) == GroupAnswer("g1", pulled(3), 3)
    assert group_answer("g1", pulled(3, header=False)).count == 3
    empty = BrokerAnswer(200, b"{}", "application/json", [])
    assert group_answer("g1", empty).count == 0


# ================================================================ the long-poll in turn


class Parked:
    """Broker groups that long-poll: each ask waits its ``wait_ms`` (or answers at once with
    the messages ``arrivals`` holds for it next), noting who was asked for how long and how
    many were asked at the same time."""

    def __init__(self, arrivals: dict[str, list[int]], down: frozenset[str] = frozenset()):
        self.arrivals = arrivals
        self.down = down
        self.asked: list[tuple[str, int]] = []
        self.at_once = 0
        self.most_at_once = 0

    async def ask(self, name: str, wait_ms: int) -> BrokerAnswer:
        self.asked.append((name, wait_ms))
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            if name in self.down:
                raise unreachable(name)
            script = self.arrivals.get(name, [])
            count = script.pop(0) if script else 0
            if count:
                return pulled(count)
            await asyncio.sleep(wait_ms / 1000)
            return pulled(0)
        finally:
            self.at_once -= 1


async def test_a_long_poll_asks_one_group_at_a_time_each_for_a_turn() -> None:
    groups = Parked({"g2": [0, 3]})  # g2: nothing on its first turn, then three messages
    found = await long_poll_in_turn(["g1", "g2"], 10_000, groups.ask, turn_ms=50)
    assert found is not None and (found.broker_group, found.count) == ("g2", 3)
    assert groups.asked == [("g1", 50), ("g2", 50), ("g1", 50), ("g2", 50)]
    assert groups.most_at_once == 1  # never two at once: none is given up while it may pop


async def test_a_long_poll_in_turn_ends_with_its_wait() -> None:
    groups = Parked({})
    assert await long_poll_in_turn(["g1", "g2"], 250, groups.ask, turn_ms=100) is None
    names = [name for name, _ in groups.asked]
    assert names[:3] == ["g1", "g2", "g1"]
    assert all(0 < wait <= 100 for _, wait in groups.asked)
    alone = Parked({})
    assert await long_poll_in_turn(["g1"], 120, alone.ask, turn_ms=50) is None
    assert alone.asked[0] == ("g1", 120)  # one group: asked for the whole wait at once
    assert await long_poll_in_turn([], 100, alone.ask) is None


async def test_a_long_poll_in_turn_passes_over_a_group_that_does_not_wait() -> None:
    groups = Parked({"g2": [0, 0, 2]}, down=frozenset({"g1"}))
    found = await long_poll_in_turn(["g1", "g2"], 10_000, groups.ask, turn_ms=30)
    assert found is not None and (found.broker_group, found.count) == ("g2", 2)
    assert [name for name, _ in groups.asked] == ["g1", "g2"] * 3
    nobody = Parked({}, down=frozenset({"g1", "g2"}))  # a round where none waited ends it
    assert await long_poll_in_turn(["g1", "g2"], 10_000, nobody.ask, turn_ms=30) is None
    assert nobody.asked == [("g1", 30), ("g2", 30)]

    async def refuses(name: str, wait_ms: int) -> BrokerAnswer:
        return pulled(0, status=429)

    assert await long_poll_in_turn(["g1", "g2"], 10_000, refuses, turn_ms=30) is None
