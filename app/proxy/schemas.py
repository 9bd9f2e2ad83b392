"""What the proxy's OpenAPI document says its operations take and answer.

The proxy reads most request bodies and queries raw and forwards them: the brokers check them
with their own models, so the document declares those same models (:func:`forwarded_body`,
:func:`forwarded_query`) without the proxy reading them. What the proxy answers is a broker's
answer in the cluster's terms (:mod:`services.cluster.labels`): cluster-wide queue ids, the
``broker_group`` of a send, of each message and queue of a group pull and of each transaction,
and transaction ids that name their group — the broker's models with those fields, here.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

from app.schemas import (
    GroupIn,
    JsonInt,
    MessageOut,
    OffsetCommitIn,
    ParamInt,
    QueueProgressOut,
    RequestBody,
    ResponseBody,
    TopicName,
)
from app.schemas.cluster import QueueRouteOut
from app.schemas.common import INT64_MAX
from app.schemas.messages import GroupPullResponse
from app.schemas.offsets import CommittedOffsetOut
from app.schemas.send import SendResponse
from app.schemas.timers import TimerCancelOut
from app.schemas.topics import QueueStatsOut, TopicDetailOut, TopicIn
from app.schemas.transactions import (
    CheckOut,
    CheckPollOut,
    EndIn,
    EndOut,
    TransactionListOut,
    TransactionOut,
)

BROKER_GROUP_DESCRIPTION: Final = "The broker group that holds it (its master answered)."
TRANSACTION_ID_DESCRIPTION: Final = (
    "The proxy's transaction id, `<broker group>~<the broker's id>`: any proxy of the cluster "
    "sends its end, state read or check answer to that group."
)

ClusterQueueIdPath = Annotated[
    ParamInt,
    Path(
        ge=0,
        le=INT64_MAX,
        description="A cluster-wide queue id, below the topic's queue count across its broker "
        "groups (its route says which group holds it).",
    ),
]
ProxyTransactionIdPath = Annotated[
    str, Path(min_length=1, max_length=512, description=TRANSACTION_ID_DESCRIPTION)
]


# ================================================================ requests


class ClusterTopicIn(TopicIn):
    """A topic spread over broker groups: its cluster-wide queue count, spread evenly."""

    write_queue_nums: JsonInt = Field(
        default=8,
        ge=1,
        le=INT64_MAX,
        description="Queues across the cluster, spread evenly over the hosting groups: at most "
        "1024 per group.",
    )
    read_queue_nums: JsonInt = Field(
        default=8,
        ge=1,
        le=INT64_MAX,
        description="Ignored: each group's queues are read as they are written.",
    )
    groups: list[str] | None = Field(
        default=None,
        min_length=1,
        description="The broker groups to host the topic (each one of the cluster's); "
        "default: every group with a master.",
    )


class ClusterOffsetCommitItem(RequestBody):
    topic: TopicName
    queue_id: JsonInt = Field(ge=0, le=INT64_MAX, description="A cluster-wide queue id.")
    offset: JsonInt = Field(
        ge=0, le=INT64_MAX, description="The next offset the group will consume."
    )
    broker_group: str | None = Field(
        default=None,
        description="The group of a retry-topic queue (`%RETRY%<group>`: each broker group "
        "has its own), as a group pull named it; the topic's own queues need none.",
    )


class ClusterOffsetBatchIn(RequestBody):
    offsets: list[ClusterOffsetCommitItem] = Field(min_length=1, max_length=1000)


BODY_MODELS: Final[tuple[type[BaseModel], ...]] = (
    GroupIn,
    OffsetCommitIn,
    ClusterOffsetBatchIn,
    EndIn,
)
"""The request bodies the proxy forwards as they came, and the document declares
(:func:`forwarded_body`); a route that rewrites its body reads it as its parameter."""


def forwarded_body(model: type[BaseModel], description: str | None = None) -> dict[str, Any]:
    """A route's ``openapi_extra``: its JSON body is ``model`` (one of :data:`BODY_MODELS`),
    read raw by the proxy and checked by the broker it goes to."""
    assert model in BODY_MODELS, f"{model.__name__} is not in BODY_MODELS"
    body: dict[str, Any] = {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
        },
    }
    if description:
        body["description"] = description
    return {"requestBody": body}


def forwarded_query(model: type[BaseModel]) -> list[dict[str, Any]]:
    """The query parameters of ``model`` (a broker's query model), as a route's
    ``openapi_extra`` parameters: the proxy passes them on, the broker reads them."""
    schema = model.model_json_schema(mode="validation")
    assert "$defs" not in schema, f"{model.__name__}: a query of plain fields only"
    required = set(schema.get("required", ()))
    return [
        {
            "name": name,
            "in": "query",
            "required": name in required,
            "schema": field,
            "description": field.get("description", ""),
        }
        for name, field in schema["properties"].items()
    ]


# ================================================================ answers


class ClusterSendResponse(SendResponse):
    broker_group: str = Field(description="The broker group that stored the messages.")


class ClusterMessageOut(MessageOut):
    broker_group: str = Field(description=BROKER_GROUP_DESCRIPTION)


class ClusterQueueProgressOut(QueueProgressOut):
    broker_group: str = Field(description=BROKER_GROUP_DESCRIPTION)


class ClusterGroupPullResponse(GroupPullResponse):
    """Every hosting group's messages and queue positions, each naming its group (commit a
    retry-topic queue with its ``broker_group``)."""

    messages: list[ClusterMessageOut]  # type: ignore[assignment]
    queues: list[ClusterQueueProgressOut]  # type: ignore[assignment]


class ClusterCommittedOffsetOut(CommittedOffsetOut):
    """A commit as it was asked for (cluster-wide queue id)."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=False)

    broker_group: str | None = Field(default=None, description="As the commit named it.")


class ClusterOffsetCommitResponse(ResponseBody):
    group: str
    offsets: list[ClusterCommittedOffsetOut]


class ClusterQueueStatsOut(QueueStatsOut):
    broker_group: str = Field(description=BROKER_GROUP_DESCRIPTION)


class ClusterTopicDetailOut(TopicDetailOut):
    """The topic as its hosting groups have it: queue counts across the cluster, every
    queue by its cluster-wide id."""

    queues: list[ClusterQueueStatsOut]  # type: ignore[assignment]


class ClusterTopicRouteOut(ResponseBody):
    """Where a topic's queues live: the cluster's route table."""

    topic: str
    queues: list[QueueRouteOut]


class ClusterTimerCancelOut(TimerCancelOut):
    broker_group: str = Field(description="The broker group that held the timer message.")


class ClusterTransactionOut(TransactionOut):
    transaction_id: str = Field(description=TRANSACTION_ID_DESCRIPTION)
    broker_group: str = Field(description="The broker group that holds the half message.")


class ClusterTransactionListOut(TransactionListOut):
    transactions: list[ClusterTransactionOut] = Field(  # type: ignore[assignment]
        description="Every group's open and given-up transactions, oldest first."
    )


class ClusterEndOut(EndOut):
    transaction_id: str = Field(description=TRANSACTION_ID_DESCRIPTION)
    broker_group: str = Field(description="The broker group that holds the transaction.")


class ClusterCheckOut(CheckOut):
    transaction_id: str = Field(description=TRANSACTION_ID_DESCRIPTION)
    broker_group: str = Field(description="The broker group that asks.")


class ClusterCheckPollOut(CheckPollOut):
    checks: list[ClusterCheckOut]  # type: ignore[assignment]


class ProxyHealthOut(ResponseBody):
    """The proxy answers: the route table it follows now (from etcd)."""

    status: str = Field(description="`ok`: the proxy answers.")
    cluster: str
    revision: int = Field(description="The etcd revision of the route table it follows.")
    masters: dict[str, str | None] = Field(
        description="Each broker group's master, by name; null during a failover."
    )
    slaves: dict[str, list[str]] = Field(description="Each broker group's slaves, by name.")
    topics: list[str] = Field(description="The topics that have a route.")
