"""Consumer group configs."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import ConfigDict, Field, WithJsonSchema, model_validator

from app.schemas.common import (
    FILTER_RULES,
    MAX_QUEUES,
    TOPIC_MAX_LENGTH,
    TOPIC_PATTERN,
    JsonInt,
    PageBody,
    RequestBody,
    ResponseBody,
    SqlFilter,
    TimestampMs,
    TopicName,
)
from services import MAX_FILTER_CHARS, SubscriptionGroupConfig

MAX_GROUP_FILTERS = 64
"""The most topics a group's subscription names."""

GroupFilters = Annotated[
    dict[TopicName, SqlFilter],
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_GROUP_FILTERS,
            "propertyNames": {
                "type": "string",
                "pattern": TOPIC_PATTERN,
                "minLength": 1,
                "maxLength": TOPIC_MAX_LENGTH,
            },
            "additionalProperties": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_FILTER_CHARS,
            },
        }
    ),
]
"""A SQL92 filter per topic (the keys' rule in ``propertyNames``, every value a filter)."""


class GroupIn(RequestBody):
    """A consumer group config. ``consume_from_timestamp`` goes with ``consume_from:
    timestamp``, and only with it: one without the other is a 422."""

    model_config = ConfigDict(
        json_schema_extra={
            "if": {
                "properties": {"consume_from": {"const": "timestamp"}},
                "required": ["consume_from"],
            },
            "then": {
                "required": ["consume_from_timestamp"],
                "properties": {"consume_from_timestamp": {"not": {"type": "null"}}},
            },
            "else": {"properties": {"consume_from_timestamp": {"type": "null"}}},
        }
    )

    consume_enable: bool = Field(default=True, description="Whether the group may pull.")
    consume_from: Literal["earliest", "latest", "timestamp"] = Field(
        default="earliest",
        description="Where the group starts on a queue it never committed; `timestamp` needs "
        "`consume_from_timestamp`.",
    )
    consume_from_timestamp: TimestampMs | None = Field(
        default=None,
        description="Epoch ms or ISO 8601. Required when consume_from is `timestamp`, and "
        "refused (422) with `earliest` or `latest`: leave it out or send null.",
    )
    retry_queue_nums: JsonInt = Field(default=1, ge=0, le=MAX_QUEUES)
    retry_max_times: JsonInt = Field(
        default=16,
        ge=-1,
        le=10_000,
        description="-1 means the default, 16. Also the POP max_reconsume_times.",
    )
    consume_mode: Literal["offsets", "pop"] | None = Field(
        default=None,
        description=(
            "offsets: pull + commit; pop: receive + ack. Unset: chosen by the first receive "
            "(pop) — mixing the two answers 409."
        ),
    )
    fifo: bool = Field(
        default=False,
        description="POP only: deliver each queue in order, one holder at a time.",
    )
    filters: GroupFilters = Field(
        default_factory=dict,
        max_length=MAX_GROUP_FILTERS,
        description="The group's subscription: a SQL92 filter per topic, applied to its "
        "pulls and receives of that topic that name no `filter` of their own. " + FILTER_RULES,
    )

    @model_validator(mode="after")
    def _timestamp_with_timestamp(self) -> Self:
        if (self.consume_from == "timestamp") != (self.consume_from_timestamp is not None):
            raise ValueError(
                "consume_from_timestamp is required with consume_from=timestamp, and only then"
            )
        return self


class GroupOut(ResponseBody):
    group: str
    consume_enable: bool
    consume_from: Literal["earliest", "latest", "timestamp"]
    consume_from_timestamp: int | None
    retry_queue_nums: int
    retry_max_times: int
    consume_mode: Literal["offsets", "pop"] | None = None
    fifo: bool = False
    filters: dict[str, str] = Field(
        default_factory=dict, description="The group's SQL92 filter per topic."
    )


class GroupListResponse(PageBody):
    groups: list[GroupOut] = Field(description="By name.")


def group_out(config: SubscriptionGroupConfig) -> GroupOut:
    timestamp = config.consume_from_timestamp
    consume_from: Literal["earliest", "latest", "timestamp"] = "earliest"
    if timestamp is not None:
        consume_from = "timestamp"
    elif config.consume_from == "latest":
        consume_from = "latest"
    return GroupOut(
        group=config.group_name,
        consume_enable=config.consume_enable,
        consume_from=consume_from,
        consume_from_timestamp=timestamp,
        retry_queue_nums=config.retry_queue_nums,
        retry_max_times=config.retry_max_times,
        consume_mode=_consume_mode(config.consume_mode),
        fifo=config.fifo,
        filters=dict(config.filters),
    )


def _consume_mode(mode: str) -> Literal["offsets", "pop"] | None:
    if mode == "offsets":
        return "offsets"
    return "pop" if mode == "pop" else None
