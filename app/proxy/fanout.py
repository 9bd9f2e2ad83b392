"""Requests that go to several broker groups: lookups asked everywhere, a consumer's budget
shared out among the groups hosting a topic, a group pull's long-polls raced, and a POP
receive's long-polls made in turn (a POP receive given up while its broker pops would hide
what it popped: :func:`long_poll_in_turn`).

A group pull or a POP receive through the proxy asks every broker group hosting the topic *at
once*, each for a share of the consumer's ``max_messages``, so the answer costs one broker round
trip, not one per group. The shares follow what each group gave last time for that consumer
group and topic (:class:`BudgetShares`): a group that filled its share may hold more and splits
the budget with the others like it; a group that did not is drained for now — it is asked
for one message every so often (a probe that tells when it has messages again), and at once
when the others come back empty. The shares add up to the budget: nothing is fetched that is
not delivered, so nothing pulled is dropped and no POP message is hidden for nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from app.proxy.forward import BrokerAnswer, Forwarder, ProxyError
from services.cluster import ClusterLabels, ClusterView, NoMasterError, TopicRoute, readers

ROTATION = [0]
"""Where the next shared-out request starts its groups: one on for every request."""

Unreachable = ProxyError | NoMasterError
_Answer = TypeVar("_Answer")


@dataclass(frozen=True, slots=True)
class GroupAnswer:
    """One broker group's answer to a shared-out request, labelled by its broker."""

    broker_group: str
    answer: BrokerAnswer
    count: int
    """How many messages it holds."""


def group_answer(name: str, answer: BrokerAnswer) -> GroupAnswer:
    """``answer`` of group ``name``, its messages counted (by the broker's header)."""
    count = answer.message_count
    if count is None:  # a broker that does not say: read it
        count = len(answer.json().get("messages") or ())
    return GroupAnswer(name, answer, count)


def rotated(items: Sequence[str]) -> list[str]:
    """``items`` from a start that moves on with every call, so no group always comes last."""
    if not items:
        return []
    start = ROTATION[0] % len(items)
    ROTATION[0] += 1
    return list(items[start:]) + list(items[:start])


async def each_group(
    groups: Sequence[str],
    ask: Callable[[str], Awaitable[_Answer]],
) -> list[tuple[str, _Answer | Unreachable]]:
    """Ask every group concurrently; an unreachable group is kept as its error."""

    if len(groups) == 1:  # the common case of a shared-out pull: no tasks to make
        try:
            return [(groups[0], await ask(groups[0]))]
        except (ProxyError, NoMasterError) as exc:
            return [(groups[0], exc)]

    async def one(group: str) -> _Answer | Unreachable:
        try:
            return await ask(group)
        except (ProxyError, NoMasterError) as exc:  # unreachable, no replica, no master
            return exc

    answers = await asyncio.gather(*(one(g) for g in groups))
    return list(zip(groups, answers, strict=True))


def all_unreachable(answers: Sequence[tuple[str, Any]]) -> Unreachable | None:
    errors = [a for _, a in answers if isinstance(a, ProxyError | NoMasterError)]
    return errors[0] if errors and len(errors) == len(answers) else None


async def read_every_group(
    forwarder: Forwarder,
    view: ClusterView,
    groups: Sequence[str],
    path: str,
    *,
    request: Any,
    query: bytes,
    labels: Callable[[str], ClusterLabels] | None = None,
) -> list[tuple[str, BrokerAnswer | Unreachable]]:
    """The same GET of ``path`` to a reader of each group (master first, then its slaves),
    concurrently; an unreachable group is kept as its error, and raised when every group is
    unreachable."""

    async def ask(group: str) -> BrokerAnswer:
        _, answer = await forwarder.call_any(
            readers(view, group),
            "GET",
            path,
            query=query,
            request=request,
            labels=None if labels is None else labels(group),
        )
        return answer

    answers = await each_group(groups, ask)
    down = all_unreachable(answers)
    if down is not None:
        raise down
    return answers


async def first_non_empty(
    groups: Sequence[str], ask: Callable[[str], Awaitable[BrokerAnswer]]
) -> GroupAnswer | None:
    """Long-poll every group at once; the first answer with messages wins, the rest go."""

    async def one(name: str) -> GroupAnswer | None:
        try:
            answer = await ask(name)
        except (ProxyError, NoMasterError):
            return None
        if not answer.ok:
            return None
        found = group_answer(name, answer)
        return found if found.count else None

    tasks = [asyncio.create_task(one(name)) for name in groups]
    try:
        for finished in asyncio.as_completed(tasks):
            result = await finished
            if result is not None:
                return result
        return None
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


LONG_POLL_TURN_MS = 250
"""How long a long-polled POP receive waits on one broker group before it asks the next."""


async def long_poll_in_turn(
    groups: Sequence[str],
    wait_ms: int,
    ask: Callable[[str, int], Awaitable[BrokerAnswer]],
    turn_ms: int = LONG_POLL_TURN_MS,
) -> GroupAnswer | None:
    """Long-poll ``groups`` one at a time (``ask(name, wait_ms)``), each for a turn of at most
    ``turn_ms``, round and round until one answers with messages or ``wait_ms`` is over.

    For a POP receive: a request is never given up while a broker may be popping for it, so
    nothing is received that is not delivered (a race over every group at once would have to
    drop its losers, and what a loser popped on its way out would stay invisible for nobody).
    A message that arrives at a group not being asked waits for that group's turn at most
    ``turn_ms`` times the other groups; one group alone is asked for the whole wait. A round
    in which no group answered at all (each unreachable, or refusing) ends the poll.
    """
    if not groups:
        return None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    turn = wait_ms if len(groups) == 1 else turn_ms
    while True:
        waited = False
        for name in groups:
            left = round((deadline - loop.time()) * 1000)
            if left <= 0:
                return None
            try:
                answer = await ask(name, min(turn, left))
            except (ProxyError, NoMasterError):
                continue
            if not answer.ok:
                continue
            waited = True
            found = group_answer(name, answer)
            if found.count:
                return found
        if not waited:
            return None


PROBE_INTERVAL_S = 0.1
"""How often a drained group is asked for one message while others fill the budget."""


@dataclass
class _Known:
    drained: frozenset[str] = frozenset()
    probed_at: float | None = None  # never


class BudgetShares:
    """How a consumer's budget is shared among broker groups, from what each gave last time.

    Per (kind, consumer group, topic) it keeps the broker groups whose last answer held fewer
    messages than they were asked for — drained, for now — and when they were last probed; a
    bounded LRU (a proxy that forgets only shares evenly again).
    """

    def __init__(self, capacity: int = 4096, probe_interval_s: float = PROBE_INTERVAL_S) -> None:
        self.capacity = capacity
        self.probe_interval_s = probe_interval_s
        self._known: OrderedDict[tuple[str, ...], _Known] = OrderedDict()

    def shares(self, key: tuple[str, ...], groups: Sequence[str], budget: int) -> dict[str, int]:
        """A share of ``budget`` for each of ``groups`` (in their order); they add up to it.

        Drained groups get one message each, at most every :data:`PROBE_INTERVAL_S`, else
        nothing (asked only when the others come back empty, see :func:`share_out`).
        """
        known = self._known.get(key)
        likely: list[str] = []
        probed: list[str] = []
        if known is not None and known.drained:  # one pass, not one per list
            drained = known.drained
            for name in groups:
                (probed if name in drained else likely).append(name)
        if not likely:  # none filled its share last time (or none known): share evenly
            likely, probed = list(groups), []
        if probed:  # the clock is read only when there is a probe to time
            last = known.probed_at if known is not None else None
            if last is not None and time.monotonic() - last < self.probe_interval_s:
                probed = []
        if probed:
            self._probed_now(key)
        shares = dict.fromkeys(groups, 0)
        if budget < len(likely) + len(probed):  # one each, for as many as the budget allows
            for name in (likely + probed)[:budget]:
                shares[name] = 1
            return shares
        for name in probed:
            shares[name] = 1
        each, extra = divmod(budget - len(probed), len(likely))
        for index, name in enumerate(likely):
            shares[name] = each + (1 if index < extra else 0)
        return shares

    def _probed_now(self, key: tuple[str, ...]) -> None:
        known = self._known.get(key) or _Known()
        known.probed_at = time.monotonic()
        self._keep(key, known)

    def record(
        self, key: tuple[str, ...], asked: Mapping[str, int], got: Mapping[str, int]
    ) -> None:
        """What the asked groups gave; a group not asked stays as it was known."""
        known = self._known.get(key) or _Known()
        short = {name for name, share in asked.items() if got.get(name, 0) < share}
        known.drained = frozenset((known.drained - set(asked)) | short)
        self._keep(key, known)

    def _keep(self, key: tuple[str, ...], known: _Known) -> None:
        self._known[key] = known
        self._known.move_to_end(key)
        while len(self._known) > self.capacity:
            self._known.popitem(last=False)


@dataclass
class Shared:
    """What a shared-out request found: each answering group's answer, in the order asked,
    and the first refusal (when nothing was found) or error met."""

    answers: list[GroupAnswer] = field(default_factory=list)
    refused: BrokerAnswer | None = None
    error: Unreachable | None = None

    def found(self) -> int:
        return sum(answer.count for answer in self.answers)


async def share_out(
    shares: BudgetShares,
    kind: str,
    group: str,
    route: TopicRoute,
    budget: int,
    ask: Callable[[str, int, int], Awaitable[BrokerAnswer]],
) -> Shared:
    """Ask the groups hosting ``route`` at once, each for its share of consumer group
    ``group``'s ``budget`` (``ask(name, share, wait_ms=0)``); when that finds nothing and some
    groups got no share (a budget smaller than the groups), ask those too. Raises the error
    met when no group answered at all; a refusal is the caller's to pass on when no group
    delivered anything (else the groups that did are answered: with auto_commit or a POP,
    what they delivered is committed or hidden there, and lost unless it is answered)."""
    key = (kind, group, route.topic)

    def ask_now(name: str, share: int) -> Awaitable[BrokerAnswer]:
        return ask(name, share, 0)

    order = rotated(route.groups())
    given = shares.shares(key, order, budget)
    result = await _ask_shares(shares, key, given, ask_now)
    left = [name for name in order if given[name] == 0]
    if left and result.refused is None and not result.found():
        more = await _ask_shares(shares, key, shares.shares(key, left, budget), ask_now)
        # Every group that answered is kept: a long-poll that follows races them all.
        result = Shared(result.answers + more.answers, more.refused, more.error or result.error)
    if result.refused is None and not result.answers and result.error is not None:
        raise result.error
    if result.found():  # what one group delivered (committed, or popped) is the answer
        result.refused = None
    return result


async def _ask_shares(
    shares: BudgetShares,
    key: tuple[str, ...],
    given: Mapping[str, int],
    ask: Callable[[str, int], Awaitable[BrokerAnswer]],
) -> Shared:
    asked = {name: share for name, share in given.items() if share > 0}
    result = Shared()
    got: dict[str, int] = {}
    for name, answer in await each_group(list(asked), lambda name: ask(name, asked[name])):
        if isinstance(answer, ProxyError | NoMasterError):
            result.error = answer
        elif not answer.ok:
            result.refused = result.refused or answer
        else:
            found = group_answer(name, answer)
            got[name] = found.count
            result.answers.append(found)
    shares.record(key, asked, got)
    return result
