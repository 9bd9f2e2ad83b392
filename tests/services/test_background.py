"""background: a named task from start to stop, and the loop of steps and pauses it runs.

Real asyncio; every wait is bounded by BOUND (a guard against a hang, not a figure under
test), and pauses that must not end by themselves are an hour long or endless.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from services.background import BackgroundLoop, BackgroundTask, OnFailure

BOUND = 10.0
HOUR = 3600.0
log = logging.getLogger("tests.background")


class Steps:
    """A step that counts its runs and lets a test wait for the next one."""

    def __init__(self, fail: list[Exception] | None = None) -> None:
        self.runs = 0
        self.fail = list(fail or [])
        self._ran = asyncio.Event()

    async def __call__(self) -> None:
        self.runs += 1
        self._ran.set()
        if self.fail:
            raise self.fail.pop(0)

    async def reach(self, runs: int) -> None:
        """Return once the step has run ``runs`` times."""
        while self.runs < runs:
            self._ran.clear()
            await asyncio.wait_for(self._ran.wait(), BOUND)


async def forever() -> None:
    await asyncio.Event().wait()


def named(name: str) -> list[asyncio.Task[object]]:
    return [task for task in asyncio.all_tasks() if task.get_name() == name]


async def turns(count: int = 20) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


# ---------------------------------------------------------------------- BackgroundTask


async def test_a_task_runs_under_its_name_until_stopped() -> None:
    started = asyncio.Event()

    async def run() -> None:
        started.set()
        await forever()

    background = BackgroundTask("forever", run)
    background.start()
    background.start()  # started already: still one task
    await asyncio.wait_for(started.wait(), BOUND)
    [task] = named("forever")

    await background.stop()

    assert task.cancelled()
    assert named("forever") == []


async def test_stop_cancels_at_once_before_it_is_awaited() -> None:
    first = BackgroundTask("first", forever)
    second = BackgroundTask("second", forever)
    first.start()
    second.start()
    [first_task], [second_task] = named("first"), named("second")

    stopping = asyncio.gather(first.stop(), second.stop())

    assert first_task.cancelling() == 1
    assert second_task.cancelling() == 1
    await stopping
    assert first_task.cancelled() and second_task.cancelled()


async def test_stop_of_a_task_never_started_returns() -> None:
    await BackgroundTask("idle", forever).stop()


async def test_stop_does_not_raise_what_ended_the_task() -> None:
    async def broken() -> None:
        raise RuntimeError("ended early")

    background = BackgroundTask("broken", broken)
    background.start()
    [task] = named("broken")
    await asyncio.wait([task], timeout=BOUND)
    assert isinstance(task.exception(), RuntimeError)

    await background.stop()


async def test_a_stopped_task_can_be_started_again() -> None:
    runs: list[int] = []

    async def once() -> None:
        runs.append(1)

    background = BackgroundTask("once", once)
    background.start()
    await background.stop()
    background.start()
    [task] = named("once")
    await asyncio.wait([task], timeout=BOUND)
    await background.stop()

    assert runs == [1]  # the first was cancelled before it ran; the second ran


# ---------------------------------------------------------------------- BackgroundLoop


async def test_a_loop_repeats_its_step_until_stopped() -> None:
    step = Steps()
    loop = BackgroundLoop("repeat", step, 0)
    loop.start()
    await step.reach(2)
    [task] = named("repeat")

    await loop.stop()

    assert task.cancelled()
    runs = step.runs
    await turns()
    assert step.runs == runs


async def test_the_first_pause_comes_before_the_first_step_unless_step_first() -> None:
    later, first = Steps(), Steps()
    waits = BackgroundLoop("pause-first", later, HOUR)
    steps = BackgroundLoop("step-first", first, HOUR, step_first=True)
    waits.start()
    steps.start()

    await first.reach(1)
    await turns()
    assert later.runs == 0
    waits.wake()
    await later.reach(1)
    assert first.runs == 1  # its pause comes after the step
    await asyncio.gather(waits.stop(), steps.stop())


async def test_wake_ends_a_pause_with_no_end() -> None:
    step = Steps()
    loop = BackgroundLoop("until-woken", step, None, step_first=True)
    loop.start()
    await step.reach(1)
    await turns()
    assert step.runs == 1  # waits for a wake, however long

    loop.wake()

    await step.reach(2)
    await loop.stop()


async def test_a_wake_during_a_step_ends_the_pause_after_it() -> None:
    in_step, release = asyncio.Event(), asyncio.Event()
    runs = 0

    async def slow_step() -> None:
        nonlocal runs
        runs += 1
        in_step.set()
        await release.wait()

    loop = BackgroundLoop("woken-in-step", slow_step, None, step_first=True)
    loop.start()
    await asyncio.wait_for(in_step.wait(), BOUND)
    in_step.clear()
    loop.wake()
    release.set()

    await asyncio.wait_for(in_step.wait(), BOUND)  # the second step, with no wake after
    assert runs == 2
    await loop.stop()


async def test_a_pause_function_is_asked_after_each_step() -> None:
    step = Steps()
    asked: list[int] = []

    def pause_s() -> float | None:
        asked.append(step.runs)
        return 0 if step.runs < 3 else None

    loop = BackgroundLoop("told-pause", step, pause_s, step_first=True)
    loop.start()
    await step.reach(3)
    await turns()

    assert step.runs == 3
    assert asked == [1, 2, 3]
    await loop.stop()


async def test_stop_ends_a_loop_in_its_step() -> None:
    in_step = asyncio.Event()

    async def endless_step() -> None:
        in_step.set()
        await asyncio.Event().wait()

    loop = BackgroundLoop("stuck-step", endless_step, HOUR, step_first=True)
    loop.start()
    await asyncio.wait_for(in_step.wait(), BOUND)
    [task] = named("stuck-step")

    await loop.stop()

    assert task.cancelled()


async def test_without_on_failure_a_failed_step_ends_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    step = Steps(fail=[RuntimeError("bug")])
    loop = BackgroundLoop("fragile", step, 0, step_first=True)
    loop.start()
    [task] = named("fragile")
    await asyncio.wait([task], timeout=BOUND)

    assert isinstance(task.exception(), RuntimeError)
    assert step.runs == 1
    assert caplog.records == []
    await loop.stop()  # what ended it is not raised


async def test_on_failure_logs_the_step_and_the_loop_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    step = Steps(fail=[RuntimeError("bug")])
    failure = OnFailure(log, "the step failed; retrying")
    loop = BackgroundLoop("sturdy", step, 0, step_first=True, on_failure=failure)
    with caplog.at_level(logging.ERROR, logger=log.name):
        loop.start()
        await step.reach(2)

    [record] = caplog.records
    assert record.name == log.name
    assert record.getMessage() == "the step failed; retrying"
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    await loop.stop()


async def test_on_failure_retries_after_its_own_pause() -> None:
    step = Steps(fail=[RuntimeError("bug")])
    failure = OnFailure(log, "the step failed; retrying", retry_after_s=0)
    loop = BackgroundLoop("retrying", step, None, step_first=True, on_failure=failure)
    loop.start()

    await step.reach(2)  # the usual pause has no end: only the retry brings the second run
    await turns()

    assert step.runs == 2
    await loop.stop()


async def test_quiet_failures_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    step = Steps(fail=[ConnectionError("away"), RuntimeError("bug")])
    failure = OnFailure(log, "the step failed", quiet=(ConnectionError,))
    loop = BackgroundLoop("quiet", step, 0, step_first=True, on_failure=failure)
    with caplog.at_level(logging.ERROR, logger=log.name):
        loop.start()
        await step.reach(3)

    assert [type(r.exc_info[1]) for r in caplog.records if r.exc_info] == [RuntimeError]
    await loop.stop()
