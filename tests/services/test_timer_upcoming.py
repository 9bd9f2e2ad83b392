"""What the wheel holds, read from a running timer service on a real store: counts per topic
and time bucket, the soonest first, a cancel takes a message out, a rolled one counts at its
real time, and the scan limit says when the counts are partial."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.timer.upcoming import TIMER_BUCKETS, bucket_of
from tests.services.conftest import wait_for
from tests.services.test_timer_service import Wheel, now_ms

MINUTE = 60_000


@pytest.fixture
async def wheel(tmp_path: Path) -> AsyncIterator[Wheel]:
    opened = Wheel(tmp_path)
    await opened.service.start()
    yield opened
    await opened.close()


def test_buckets_split_at_their_upper_bounds() -> None:
    assert [bucket_of(ms) for ms in (0, 59_999, 60_000, 3_599_999, 3_600_000)] == [0, 0, 1, 2, 3]
    assert bucket_of(10 * 86_400_000) == len(TIMER_BUCKETS) - 1


async def test_waiting_messages_are_counted_listed_and_a_cancel_removes_one(
    wheel: Wheel,
) -> None:
    service = wheel.service
    start = now_ms()
    # The test wheel rolls beyond 2 s: these sit at their roll, and count at their real time.
    late = wheel.schedule("Orders", b"late", start + 20 * MINUTE)
    early = wheel.schedule("Orders", b"early", start + 30_000)
    other = wheel.schedule("Audit", b"other", start + 2 * 3_600_000)

    def enqueued() -> bool:
        progress = service.progress()
        return progress is not None and progress.enqueue_behind == 0

    await wait_for(enqueued)

    upcoming = service.upcoming()
    assert upcoming is not None and upcoming.complete
    assert upcoming.counts == {"Audit": [0, 0, 0, 1, 0], "Orders": [1, 0, 1, 0, 0]}
    assert [t.uniq_key for t in upcoming.next] == [early, late, other]
    assert all(t.rolls for t in upcoming.next)
    # Due when they asked to be: their slot starts before that, and fires at or after it.
    assert [t.due_ms for t in upcoming.next] == [
        start + 30_000,
        start + 20 * MINUTE,
        start + 2 * 3_600_000,
    ]
    assert all(t.fire_ms < t.due_ms <= t.fire_ms + service.precision_ms for t in upcoming.next)
    assert [t.message.body for t in upcoming.next] == [b"early", b"late", b"other"]

    only = service.upcoming("Orders", next_count=1)
    assert only is not None and only.counts == {"Orders": [1, 0, 1, 0, 0]}
    assert [t.uniq_key for t in only.next] == [early]

    handle = service.handle_for("Orders", upcoming.next[0].fire_ms, early)
    await service.cancel("Orders", handle)
    after = service.upcoming()
    assert after is not None and after.counts["Orders"] == [0, 0, 1, 0, 0]
    assert early not in [t.uniq_key for t in after.next]

    partial = service.upcoming(scan_limit=1)
    assert partial is not None and not partial.complete and partial.scanned == 1
