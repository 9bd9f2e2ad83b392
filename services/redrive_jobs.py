"""Redrive jobs: a DLQ redrive run in the background, with its progress and outcomes.

A job is an asyncio task over :class:`services.dlq.DlqService`'s selection and sends, so it
follows the same rules (paced, never sending a dead letter twice, moving the redrive
watermark). Jobs live in the broker's memory; the newest :data:`MAX_KEPT_REDRIVE_JOBS` are
kept. ``cancel`` stops a job and keeps it for reading; ``delete`` stops it if it still runs
and forgets it (a lookup is then REDRIVE_JOB_NOT_FOUND). A shutdown cancels every job.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from services.dlq import DlqService, RedriveOutcome, RedriveRequest, RedriveStatus, check_rate
from services.errors import (
    BrokerUnavailableError,
    RedriveJobNotFoundError,
    TooManyRedriveJobsError,
)

MAX_ACTIVE_REDRIVE_JOBS: Final = 8
MAX_KEPT_REDRIVE_JOBS: Final = 100

log = logging.getLogger(__name__)


class RedriveJobState(Enum):
    """A redrive job's lifecycle: QUEUED -> RUNNING -> DONE, CANCELLED or FAILED."""

    QUEUED = "queued"  # created; selecting its dead letters
    RUNNING = "running"  # re-sending them
    DONE = "done"  # every selected dead letter has an outcome
    CANCELLED = "cancelled"  # cancelled by a caller, or by the broker's shutdown
    FAILED = "failed"  # stopped by an unexpected error (see ``error``)


@dataclass(slots=True)
class RedriveJob:
    """A redrive running in the background, with its progress and outcomes so far."""

    id: str
    request: RedriveRequest
    created_ms: int
    state: RedriveJobState = RedriveJobState.QUEUED
    total: int = 0  # dead letters selected (known once it runs)
    outcomes: list[RedriveOutcome] = field(default_factory=list)
    finished_ms: int | None = None
    error: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def finished(self) -> bool:
        return self.state in _FINAL_JOB_STATES

    def count(self, status: RedriveStatus) -> int:
        return sum(1 for o in self.outcomes if o.status is status)

    def finish(self, state: RedriveJobState, error: str | None = None) -> None:
        """Enter a final state; a job already in one stays there."""
        if not self.finished:
            self.state = state
            self.error = error
            self.finished_ms = _now_ms()

    def stop(self) -> None:
        """Cancel it if it has not finished (sends already made stay)."""
        if not self.finished:
            self.finish(RedriveJobState.CANCELLED)
            if self.task is not None:
                self.task.cancel()


_FINAL_JOB_STATES: Final = frozenset(
    {RedriveJobState.DONE, RedriveJobState.CANCELLED, RedriveJobState.FAILED}
)


def _now_ms() -> int:
    return int(time.time() * 1000)


class RedriveJobs:
    """The broker's redrive jobs, by id."""

    def __init__(self, dlq: DlqService) -> None:
        self._dlq = dlq
        self._jobs: dict[str, RedriveJob] = {}

    def start(self, request: RedriveRequest) -> RedriveJob:
        """Start a redrive in the background (call on the event loop); its progress is on
        the job. TooManyRedriveJobsError beyond :data:`MAX_ACTIVE_REDRIVE_JOBS`."""
        check_rate(request.rate_per_s)
        if self._dlq.stopping:
            raise BrokerUnavailableError("the broker is stopping: no new redrive jobs")
        active = sum(1 for job in self._jobs.values() if not job.finished)
        if active >= MAX_ACTIVE_REDRIVE_JOBS:
            raise TooManyRedriveJobsError(
                f"{active} redrive jobs are queued or running (the cap is "
                f"{MAX_ACTIVE_REDRIVE_JOBS}); cancel one or wait for one to finish"
            )
        self._forget_finished()
        job = RedriveJob(uuid.uuid4().hex, request, _now_ms())
        self._jobs[job.id] = job
        job.task = asyncio.create_task(self._run(job), name=f"redrive-job-{job.id}")
        return job

    def get(self, group: str, job_id: str) -> RedriveJob:
        """The job ``job_id`` of ``group``; RedriveJobNotFoundError when there is none."""
        job = self._jobs.get(job_id)
        if job is None or job.request.group != group:
            raise RedriveJobNotFoundError(f"group {group} has no redrive job {job_id}")
        return job

    def of_group(self, group: str) -> list[RedriveJob]:
        """The group's jobs still remembered, newest first."""
        return [job for job in reversed(self._jobs.values()) if job.request.group == group]

    def page_of_group(
        self, group: str, after: str | None, limit: int
    ) -> tuple[list[RedriveJob], int]:
        """At most ``limit`` of the group's jobs, newest first, from the one after job
        ``after`` (from the newest when None); and the total. Jobs are forgotten oldest
        first, so when ``after`` is forgotten so is every job after it: an empty page."""
        jobs = self.of_group(group)
        ids = [job.id for job in jobs]
        if after is None:
            start = 0
        elif after in ids:
            start = ids.index(after) + 1
        else:
            start = len(jobs)
        return jobs[start : start + limit], len(jobs)

    def cancel(self, group: str, job_id: str) -> RedriveJob:
        """Cancel a queued or running job and keep it; a finished job is returned as is."""
        job = self.get(group, job_id)
        job.stop()
        return job

    def delete(self, group: str, job_id: str) -> RedriveJob:
        """Cancel the job if it still runs, then forget it; returns it as it ended."""
        job = self.cancel(group, job_id)
        del self._jobs[job.id]
        return job

    def begin_shutdown(self) -> None:
        """The broker is stopping: cancel every job."""
        for job in self._jobs.values():
            job.stop()

    def _forget_finished(self) -> None:
        """Keep at most :data:`MAX_KEPT_REDRIVE_JOBS`, dropping the oldest finished first."""
        excess = len(self._jobs) + 1 - MAX_KEPT_REDRIVE_JOBS
        for job in [j for j in self._jobs.values() if j.finished][: max(0, excess)]:
            del self._jobs[job.id]

    async def _run(self, job: RedriveJob) -> None:
        try:
            await asyncio.sleep(0)  # let the creating request answer first
            entries, _ = self._dlq.select(job.request)
            job.total = len(entries)
            job.state = RedriveJobState.RUNNING
            completed = await self._dlq.run(job.request, entries, job.outcomes)
            self._dlq.advance_watermark(job.request, job.outcomes)
        except asyncio.CancelledError:
            job.finish(RedriveJobState.CANCELLED)
            raise
        except Exception as exc:  # the job reports it; the broker carries on
            log.exception("redrive job %s failed", job.id)
            job.finish(RedriveJobState.FAILED, f"{type(exc).__name__}: {exc}")
        else:
            job.finish(RedriveJobState.DONE if completed else RedriveJobState.CANCELLED)
