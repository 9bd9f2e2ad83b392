"""Background work of the broker's services: one named asyncio task each, from start to stop.

:class:`BackgroundTask` runs one coroutine function as a named task; stopping it cancels the
task at once (several stopped together are cancelled before any of them runs again) and
returns once it has ended. :class:`BackgroundLoop` is the usual body of such a task:
a step run again and again with a pause between runs -- a fixed number of seconds, or what a
function tells after each step (until a deadline, or until woken). A wake ends a pause at
once; one that comes during a step ends the pause after it. A step that raises ends the loop,
unless the loop was given an :class:`OnFailure`: then the failure is logged and the loop goes
on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

Run = Callable[[], Coroutine[Any, Any, None]]
"""What a background task runs."""
Step = Callable[[], Awaitable[None]]
"""One run of a loop's work."""
Pause = float | None | Callable[[], float | None]
"""Seconds between two steps, or a function that tells them after each step. None: until
woken; 0 or less: no pause, but a turn for the event loop's other tasks."""


class BackgroundTask:
    """``run`` as one task named ``name``, from :meth:`start` until it returns or is stopped."""

    __slots__ = ("_run", "_task", "name")

    def __init__(self, name: str, run: Run) -> None:
        self.name = name
        self._run = run
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the task on the running loop; nothing when it was started already."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    def stop(self) -> Awaitable[None]:
        """Cancel the task now; awaited, the answer returns once the task has ended (at once
        when it was not started). How it ended is not raised: cancelled, or by an exception
        that ended it earlier."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        return _ended(task)


@dataclass(frozen=True, slots=True)
class OnFailure:
    """What a loop does when its step raises: logs ``message`` with the traceback on
    ``logger`` (not for the ``quiet`` exceptions), pauses ``retry_after_s`` (None: its usual
    pause) and goes on."""

    logger: logging.Logger
    message: str
    retry_after_s: float | None = None
    quiet: tuple[type[Exception], ...] = ()


class BackgroundLoop:
    """``step`` run again and again as one task named ``name``, ``pause_s`` between runs.

    The first pause comes before the first step, or after it (``step_first``).
    """

    __slots__ = ("_on_failure", "_pause_s", "_step", "_step_first", "_task", "_woken")

    def __init__(
        self,
        name: str,
        step: Step,
        pause_s: Pause,
        *,
        step_first: bool = False,
        on_failure: OnFailure | None = None,
    ) -> None:
        self._step = step
        self._pause_s = pause_s
        self._step_first = step_first
        self._on_failure = on_failure
        self._woken = asyncio.Event()
        self._task = BackgroundTask(name, self._run)

    def start(self) -> None:
        """Start the loop on the running event loop; nothing when it was started already."""
        self._task.start()

    def stop(self) -> Awaitable[None]:
        """Cancel the loop now, in a step or a pause; awaited, the answer returns once it has
        ended."""
        return self._task.stop()

    def wake(self) -> None:
        """End the current pause now; during a step, end the pause that follows it."""
        self._woken.set()

    async def _run(self) -> None:
        if not self._step_first:
            await self._pause()
        while True:
            self._woken.clear()
            try:
                await self._step()
            except Exception as exc:
                failure = self._on_failure
                if failure is None:
                    raise
                if not isinstance(exc, failure.quiet):
                    failure.logger.exception(failure.message)
                if failure.retry_after_s is not None:
                    await asyncio.sleep(failure.retry_after_s)
                    continue
            await self._pause()

    async def _pause(self) -> None:
        seconds = self._pause_s() if callable(self._pause_s) else self._pause_s
        if seconds is not None and seconds <= 0:
            await asyncio.sleep(0)
            return
        # asyncio.timeout, not wait_for: in 3.11 wait_for may turn a cancel that meets its
        # timeout into TimeoutError, and a stop would then never end the loop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._woken.wait()


async def _ended(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        await asyncio.gather(task, return_exceptions=True)
