"""Recent pulls: what a group was served, remembered per queue within bounds."""

from __future__ import annotations

from services.trace.recent import RecentPulls, Served

KEY = ("g", "T", 0)


def served(n: int) -> Served:
    return (f"{n:032X}", "T", 1, [], 1000 + n, None)


def pulled(*offsets: int) -> list[tuple[int, Served]]:
    return [(offset, served(offset)) for offset in offsets]


def test_a_commit_takes_what_was_served_below_it() -> None:
    recent = RecentPulls()
    recent.remember(KEY, pulled(0, 1, 2, 3, 4))
    assert recent.lowest(KEY) == 0
    taken = recent.take(KEY, 0, 3)
    assert sorted(taken) == [0, 1, 2]
    assert recent.lowest(KEY) == 3
    assert recent.take(KEY, 0, 3) == {}
    recent.forget_before(KEY, 10)
    assert recent.lowest(KEY) is None


def test_the_oldest_queues_and_messages_are_forgotten_first() -> None:
    recent = RecentPulls(max_queues=2, max_per_queue=3)
    recent.remember(KEY, pulled(0, 1))
    recent.remember(KEY, pulled(2, 3, 4))
    assert recent.lowest(KEY) == 2
    recent.remember(("g", "T", 1), pulled(0))
    recent.remember(("g", "T", 2), pulled(0))
    assert recent.lowest(KEY) is None
    assert recent.lowest(("g", "T", 2)) == 0


def test_a_pull_of_the_same_offset_again_replaces_the_first() -> None:
    recent = RecentPulls()
    recent.remember(KEY, pulled(0))
    recent.remember(KEY, [(0, served(9))])
    assert recent.take(KEY, 0, 1)[0][4] == 1009
