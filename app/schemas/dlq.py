"""Dead letters: browse a group's DLQ, redrive it now, or redrive it as a background job."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.schemas.common import (
    JsonInt,
    PageBody,
    RequestBody,
    ResponseBody,
    ShortText,
    TimestampMs,
    TopicName,
)
from app.schemas.messages import MessageFields, message_out
from services import (
    MAX_KEPT_REDRIVE_JOBS,
    MAX_REDRIVE,
    MAX_REDRIVE_RATE,
    MIN_REDRIVE_RATE,
    REDRIVE_PROMPT_S,
    DlqPage,
    RedriveJob,
    RedriveJobState,
    RedriveOutcome,
    RedriveReport,
    RedriveStatus,
)

REDRIVE_JOB_ID_PATTERN = r"^[0-9a-f]{32}$"

# ==================================================================== browse


class DeadLetterOut(MessageFields):
    original_topic: str = Field(description="Where it was first sent (RETRY_TOPIC).")
    redriven_as: str | None = Field(
        description="msg_id of its copy in the original topic, when it has been redriven."
    )


class DeadLetterPage(ResponseBody):
    group: str
    topic: str = Field(description="%DLQ%<group>")
    min_offset: int
    max_offset: int
    next_offset: int = Field(description="Pass as `offset` for the next page.")
    stored: int = Field(description="Dead letters stored (waiting + redriven).")
    waiting: int = Field(
        description="Dead letters not redriven yet: those from the oldest one still waiting "
        "(the group's offset on its DLQ queue, which a redrive moves; the depth the Groups "
        "page and the Spark lag report show)."
    )
    redriven: int = Field(description="Dead letters redriven, still stored.")
    messages: list[DeadLetterOut]


def dead_letter_page_out(group: str, topic: str, page: DlqPage, encoding: str) -> DeadLetterPage:
    return DeadLetterPage(
        group=group,
        topic=topic,
        min_offset=page.min_offset,
        max_offset=page.max_offset,
        next_offset=page.next_offset,
        stored=page.depth.stored,
        waiting=page.depth.waiting,
        redriven=page.depth.redriven,
        messages=[
            DeadLetterOut.model_validate(
                {
                    **message_out(entry.message, encoding),
                    "original_topic": entry.original_topic,
                    "redriven_as": entry.redriven_as,
                }
            )
            for entry in page.entries
        ],
    )


# ==================================================================== redrive


class RedriveIn(RequestBody):
    """Which dead letters to send back, and where. Filters combine with AND; no filter
    selects every dead letter (up to ``limit``)."""

    msg_ids: list[ShortText] = Field(
        default_factory=list, max_length=10_000, description="msg_ids or UNIQ_KEYs."
    )
    tags: list[ShortText] = Field(default_factory=list, max_length=64)
    begin_timestamp: TimestampMs | None = None
    end_timestamp: TimestampMs | None = None
    target_topic: TopicName | None = Field(
        default=None, description="Default: each message's original topic (RETRY_TOPIC)."
    )
    dry_run: bool = Field(default=False, description="Report what would move where; send none.")
    limit: JsonInt = Field(
        default=1000, ge=1, le=MAX_REDRIVE, description="At most this many messages."
    )
    rate_per_second: float | None = Field(
        default=None,
        ge=MIN_REDRIVE_RATE,
        le=MAX_REDRIVE_RATE,
        description=(
            f"Pace the re-sends: at most this many per second ({MIN_REDRIVE_RATE:g} to "
            f"{MAX_REDRIVE_RATE:.0f}); default: as fast as the store takes them. A redrive "
            f"call whose paced sends would take longer than {REDRIVE_PROMPT_S:.0f} s is "
            "refused (REDRIVE_TOO_LONG): start a redrive job for it."
        ),
    )


class RedriveOutcomeOut(ResponseBody):
    dlq_msg_id: str
    uniq_key: str
    target_topic: str
    status: Literal["WOULD_MOVE", "MOVED", "ALREADY_MOVED", "FAILED"]
    new_msg_id: str | None = Field(default=None, description="MOVED, ALREADY_MOVED: the copy.")
    error: str | None = Field(default=None, description="FAILED: why.")


class RedriveSummary(ResponseBody):
    selected: int
    would_move: int
    moved: int
    already_moved: int
    failed: int


class RedriveOut(ResponseBody):
    group: str
    dry_run: bool
    summary: RedriveSummary
    outcomes: list[RedriveOutcomeOut]


def _outcome_out(outcome: RedriveOutcome) -> RedriveOutcomeOut:
    return RedriveOutcomeOut(
        dlq_msg_id=outcome.dlq_msg_id,
        uniq_key=outcome.uniq_key,
        target_topic=outcome.target_topic,
        status=outcome.status.value,
        new_msg_id=outcome.new_msg_id,
        error=outcome.error,
    )


def _summary(selected: int, outcomes: RedriveReport | RedriveJob) -> RedriveSummary:
    return RedriveSummary(
        selected=selected,
        would_move=outcomes.count(RedriveStatus.WOULD_MOVE),
        moved=outcomes.count(RedriveStatus.MOVED),
        already_moved=outcomes.count(RedriveStatus.ALREADY_MOVED),
        failed=outcomes.count(RedriveStatus.FAILED),
    )


def redrive_out(report: RedriveReport) -> RedriveOut:
    return RedriveOut(
        group=report.group,
        dry_run=report.dry_run,
        summary=_summary(len(report.outcomes), report),
        outcomes=[_outcome_out(o) for o in report.outcomes],
    )


# ==================================================================== redrive jobs

RedriveJobStateName = Literal["queued", "running", "done", "cancelled", "failed"]
assert set(RedriveJobStateName.__args__) == {s.value for s in RedriveJobState}  # type: ignore[attr-defined]


class RedriveJobOut(ResponseBody):
    """A redrive running in the background: its state, progress and outcomes so far."""

    id: str = Field(description="The job's id (32 hex digits).")
    group: str
    state: RedriveJobStateName = Field(
        description="queued → running → done; or cancelled (DELETE, or the broker stopped) "
        "or failed (see `error`). Sends made before a cancel stay made; a new job with the "
        "same selection does not send them twice."
    )
    dry_run: bool
    rate_per_second: float | None
    total: int = Field(description="Dead letters selected; 0 until the job is running.")
    done: int = Field(description="Dead letters with an outcome so far.")
    summary: RedriveSummary = Field(description="Counts of the outcomes so far.")
    outcomes: list[RedriveOutcomeOut] = Field(description="Each message's outcome, in order.")
    created_at: int = Field(description="Ms since the epoch.")
    finished_at: int | None = Field(description="Ms since the epoch; null until it ends.")
    error: str | None = Field(description="Why a failed job stopped; null otherwise.")


class RedriveJobListOut(PageBody):
    group: str
    jobs: list[RedriveJobOut] = Field(
        description="Newest first. The newest jobs are kept, at most "
        f"{MAX_KEPT_REDRIVE_JOBS}; older finished ones are forgotten."
    )


def redrive_job_out(job: RedriveJob) -> RedriveJobOut:
    request = job.request
    return RedriveJobOut(
        id=job.id,
        group=request.group,
        state=job.state.value,
        dry_run=request.dry_run,
        rate_per_second=request.rate_per_s,
        total=job.total,
        done=len(job.outcomes),
        summary=_summary(job.total, job),
        outcomes=[_outcome_out(o) for o in job.outcomes],
        created_at=job.created_ms,
        finished_at=job.finished_ms,
        error=job.error,
    )


def redrive_job_list_out(
    group: str, jobs: list[RedriveJob], total: int, limit: int
) -> RedriveJobListOut:
    """A page of jobs; ``next_after`` is the last one's id when the page is full."""
    return RedriveJobListOut(
        group=group,
        jobs=[redrive_job_out(job) for job in jobs],
        total=total,
        next_after=jobs[-1].id if len(jobs) == limit else None,
    )
