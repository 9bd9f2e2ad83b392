"""Dead letters: browse a group's DLQ, redrive it in one call, or as a background job.

A redrive call answers when every selected dead letter has its outcome, so it is for dry
runs and for redrives that finish promptly; a paced redrive expected to take longer than
``REDRIVE_PROMPT_S`` is refused (REDRIVE_TOO_LONG) and runs as a job instead:
``POST .../redrive-jobs`` answers 202 at once, ``GET`` shows its progress, ``DELETE`` cancels it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.responses import Response

from app.deps import BrokerDep, SettingsDep
from app.routes.params import (
    AfterJobQuery,
    BodyEncodingQuery,
    GroupPath,
    PageLimitQuery,
    RedriveJobIdPath,
)
from app.schemas import (
    INT64_MAX,
    DeadLetterPage,
    ParamInt,
    RedriveIn,
    RedriveJobListOut,
    RedriveJobOut,
    RedriveOut,
    dead_letter_page_out,
    redrive_job_list_out,
    redrive_job_out,
    redrive_out,
)
from app.schemas.common import TIMESTAMP_DESCRIPTION, TimestampMs
from services import (
    REDRIVE_PROMPT_S,
    DlqFilter,
    DlqState,
    RedriveRequest,
    dlq_topic,
)
from services.errors import RedriveTooLongError

router = APIRouter(tags=["groups"])


def _jobs_path(group: str) -> str:
    return f"/v1/groups/{group}/dlq/redrive-jobs"


def _redrive_request(group: str, body: RedriveIn) -> RedriveRequest:
    selection = DlqFilter(
        msg_ids=frozenset(body.msg_ids),
        tags=frozenset(body.tags),
        begin_ms=body.begin_timestamp,
        end_ms=body.end_timestamp,
    )
    return RedriveRequest(
        group,
        selection,
        target_topic=body.target_topic,
        dry_run=body.dry_run,
        limit=body.limit,
        rate_per_s=body.rate_per_second,
    )


@router.get(
    "/v1/groups/{group}/dlq/messages",
    operation_id="listDeadLetters",
    summary="Browse a group's dead-letter queue",
    description=(
        "A page of at most `limit` messages whose bodies add up to at most the server's "
        "pull byte cap (`max_pull_bytes`, 8 MiB by default; the first message always); "
        "`next_offset` continues. By default only the dead letters still waiting are listed: "
        "a redrive takes them off, as with SQS, and `waiting` falls; they stay stored "
        "(`state=redriven` lists them, each with its copy's id in `redriven_as`)."
    ),
    response_model=DeadLetterPage,
)
async def list_dead_letters(
    group: GroupPath,
    broker: BrokerDep,
    settings: SettingsDep,
    offset: Annotated[
        ParamInt | None,
        Query(ge=0, le=INT64_MAX, description="Start here; default: the oldest."),
    ] = None,
    limit: Annotated[ParamInt, Query(ge=1, le=500, description="Most messages to return.")] = 50,
    tags: Annotated[list[str] | None, Query(max_length=64, description="Only these tags.")] = None,
    begin_timestamp: Annotated[TimestampMs | None, Query(description=TIMESTAMP_DESCRIPTION)] = None,
    end_timestamp: Annotated[TimestampMs | None, Query(description=TIMESTAMP_DESCRIPTION)] = None,
    body_encoding: BodyEncodingQuery = "auto",
    state: Annotated[
        Literal["waiting", "redriven", "all"],
        Query(
            description="`waiting` (not redriven yet), `redriven` (a copy is in the original "
            "topic; kept until the files expire) or `all`."
        ),
    ] = "waiting",
) -> DeadLetterPage:
    selection = DlqFilter(tags=tuple(tags or ()), begin_ms=begin_timestamp, end_ms=end_timestamp)
    page = broker.dlq.browse(
        group, offset, limit, selection, settings.max_pull_bytes, DlqState(state)
    )
    return dead_letter_page_out(group, dlq_topic(group), page, body_encoding)


@router.post(
    "/v1/groups/{group}/dlq/redrive",
    operation_id="redriveDeadLetters",
    summary="Send dead letters back to their topic (or another) — preview with dry_run",
    description=(
        "Each selected dead letter is re-sent with `reconsume_times` 0 and a `REDRIVEN_FROM` "
        "property; the answer lists every message's outcome. Dead letters are not removed, so "
        "a run that stops midway loses nothing, and running it again does not send twice "
        "(ALREADY_MOVED). With `rate_per_second` the sends are spaced 1/rate apart (none "
        "waits after the last); when that would take longer than "
        f"{REDRIVE_PROMPT_S:.0f} s the call is refused with 422 REDRIVE_TOO_LONG: start a "
        "redrive job (`POST /v1/groups/{group}/dlq/redrive-jobs`) instead. A call cut short "
        "by a broker shutdown answers 503; run it again to finish."
    ),
    response_model=RedriveOut,
)
async def redrive_dead_letters(group: GroupPath, body: RedriveIn, broker: BrokerDep) -> RedriveOut:
    request = _redrive_request(group, body)
    try:
        report = await broker.dlq.redrive(
            group,
            request.selection,
            target_topic=request.target_topic,
            dry_run=request.dry_run,
            limit=request.limit,
            rate_per_s=request.rate_per_s,
        )
    except RedriveTooLongError as exc:
        raise RedriveTooLongError(f"{exc} (POST {_jobs_path(group)})") from None
    return redrive_out(report)


@router.post(
    "/v1/groups/{group}/dlq/redrive-jobs",
    operation_id="createRedriveJob",
    summary="Start a redrive in the background; answers at once with the job",
    description=(
        "The same selection and rules as `POST /v1/groups/{group}/dlq/redrive`, with no cap "
        "on how long the paced sends take. The answer is 202 with the job and its "
        "`Location`; `GET` it for progress and the outcomes so far. `POST {Location}/cancel` "
        "stops it and keeps it for reading; `DELETE` stops it if it still runs and forgets it "
        "(a `GET` is then 404). "
        "Jobs live in the broker's memory: a shutdown cancels them (their sends stay made), "
        "and a new job with the same selection sends only what is left."
    ),
    status_code=202,
    response_model=RedriveJobOut,
    responses={
        202: {
            "description": "The job, queued.",
            "headers": {
                "Location": {
                    "description": "The job's URL.",
                    "schema": {"type": "string"},
                }
            },
        },
    },
)
async def create_redrive_job(
    group: GroupPath, body: RedriveIn, broker: BrokerDep, response: Response
) -> RedriveJobOut:
    job = broker.redrive_jobs.start(_redrive_request(group, body))
    response.headers["Location"] = f"{_jobs_path(group)}/{job.id}"
    return redrive_job_out(job)


@router.get(
    "/v1/groups/{group}/dlq/redrive-jobs",
    operation_id="listRedriveJobs",
    summary="A page of a group's redrive jobs, newest first",
    description="At most `limit` jobs after job `after`; `next_after` continues.",
    response_model=RedriveJobListOut,
)
async def list_redrive_jobs(
    group: GroupPath,
    broker: BrokerDep,
    limit: PageLimitQuery = 100,
    after: AfterJobQuery = None,
) -> RedriveJobListOut:
    jobs, total = broker.redrive_jobs.page_of_group(group, after, limit)
    return redrive_job_list_out(group, jobs, total, limit)


@router.get(
    "/v1/groups/{group}/dlq/redrive-jobs/{job_id}",
    operation_id="getRedriveJob",
    summary="A redrive job: its state, progress and the outcomes so far",
    response_model=RedriveJobOut,
)
async def get_redrive_job(
    group: GroupPath, job_id: RedriveJobIdPath, broker: BrokerDep
) -> RedriveJobOut:
    return redrive_job_out(broker.redrive_jobs.get(group, job_id))


@router.post(
    "/v1/groups/{group}/dlq/redrive-jobs/{job_id}/cancel",
    operation_id="cancelRedriveJob",
    summary="Cancel a redrive job and keep it (sends already made stay); a finished job is "
    "unchanged",
    response_model=RedriveJobOut,
)
async def cancel_redrive_job(
    group: GroupPath, job_id: RedriveJobIdPath, broker: BrokerDep
) -> RedriveJobOut:
    return redrive_job_out(broker.redrive_jobs.cancel(group, job_id))


@router.delete(
    "/v1/groups/{group}/dlq/redrive-jobs/{job_id}",
    operation_id="deleteRedriveJob",
    summary="Forget a redrive job, cancelling it first if it still runs; answers it as it ended",
    description="Sends already made stay. Afterwards the job is gone: `GET` answers 404 "
    "REDRIVE_JOB_NOT_FOUND (to stop a job and keep reading it, `POST .../cancel`).",
    response_model=RedriveJobOut,
)
async def delete_redrive_job(
    group: GroupPath, job_id: RedriveJobIdPath, broker: BrokerDep
) -> RedriveJobOut:
    return redrive_job_out(broker.redrive_jobs.delete(group, job_id))
