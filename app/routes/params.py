"""Path and query parameters shared by several routes, with their documented bounds.

Names are documented with their pattern and checked by the services' rules, so that a bad
topic name is INVALID_TOPIC_NAME (400) whether it comes in the path or in a body, and a bad
group name INVALID_GROUP_NAME (400) in the path or the query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from fastapi import Path, Query
from pydantic import AfterValidator

from app.schemas import (
    GROUP_MAX_LENGTH,
    MAX_QUEUES,
    REDRIVE_JOB_ID_PATTERN,
    TOPIC_MAX_LENGTH,
    TOPIC_PATTERN,
    ParamInt,
    checked_group_name,
)
from app.schemas.pop import IN_FLIGHT_CURSOR_PATTERN

TopicPath = Annotated[
    str,
    Path(
        description=(
            f"Topic name: 1 to {TOPIC_MAX_LENGTH} of `a-z A-Z 0-9 _ - % |`; "
            "percent-encode `%` and `|` in the URL (`%25RETRY%25g`)."
        ),
        json_schema_extra={"pattern": TOPIC_PATTERN, "maxLength": TOPIC_MAX_LENGTH},
    ),
]
MessageIdPath = Annotated[
    str,
    Path(
        description="The offsetMsgId a send returned (32 hex characters; 56 for IPv6).",
        json_schema_extra={"pattern": "^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})$"},
    ),
]
GroupPath = Annotated[
    str,
    Path(
        description=f"Consumer group name: 1 to {GROUP_MAX_LENGTH} of `a-z A-Z 0-9 _ - % |`.",
        json_schema_extra={"pattern": TOPIC_PATTERN, "maxLength": GROUP_MAX_LENGTH},
    ),
    AfterValidator(checked_group_name),
]
ProducerGroupPath = Annotated[
    str,
    Path(
        description=f"Producer group name: 1 to {GROUP_MAX_LENGTH} of `a-z A-Z 0-9 _ - % |`.",
        json_schema_extra={"pattern": TOPIC_PATTERN, "maxLength": GROUP_MAX_LENGTH},
    ),
    AfterValidator(checked_group_name),
]
QueueIdPath = Annotated[
    ParamInt, Path(ge=0, lt=MAX_QUEUES, description="Queue id, below the topic's queue count.")
]
BodyEncodingQuery = Annotated[
    Literal["auto", "base64"],
    Query(
        description="`auto`: bodies that are valid UTF-8 as text, others as base64; "
        "`base64`: every body as base64."
    ),
]
RedriveJobIdPath = Annotated[
    str,
    Path(
        description="A redrive job's id, as its creation answered.",
        json_schema_extra={"pattern": REDRIVE_JOB_ID_PATTERN},
    ),
]
PageLimitQuery = Annotated[
    ParamInt, Query(ge=1, le=1000, description="Most items on the page (1 to 1000).")
]
AfterNameQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=TOPIC_MAX_LENGTH,
        description="Start after this name (the previous page's `next_after`); "
        "default: from the first.",
    ),
]


def name_page_description(item: str) -> str:
    """The description of a list paged by name (:data:`PageLimitQuery`,
    :data:`AfterNameQuery`) of ``item``s."""
    return (
        f"At most `limit` {item}s named after `after`; `next_after` continues, `total` counts "
        f"every {item}."
    )


def next_after(page: Sequence[str], limit: int) -> str | None:
    """A page's ``next_after``: the name (or id) of its last item when the page is full --
    more may follow -- else None."""
    return page[-1] if len(page) == limit else None


AfterInFlightQuery = Annotated[
    str | None,
    Query(
        description="Start after this message, `<topic>:<queue id>:<offset>` (the previous "
        "page's `next_after`); default: from the first.",
        pattern=IN_FLIGHT_CURSOR_PATTERN,
    ),
]
AfterJobQuery = Annotated[
    str | None,
    Query(
        description="Start after this job (the previous page's `next_after`); default: from "
        "the newest.",
        pattern=REDRIVE_JOB_ID_PATTERN,
    ),
]
