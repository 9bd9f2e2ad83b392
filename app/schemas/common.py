"""What every request and response body shares: limits, name types, base models, problems.

Request models are strict (``false`` is not an integer, ``"1"`` is not a number) and forbid
unknown fields, so a typo is a 422 rather than a silently ignored option. One exception to
strictness: a JSON body integer may be written with a decimal point when it is whole
(``4.0``), as JSON Schema counts it an integer (:data:`JsonInt`).

Response models list every field the server always sends as required, defaults included
(:class:`ResponseBody`), so a client generated from the document does not see them as optional.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, NotRequired

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    WithJsonSchema,
    with_config,
)
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict

from services import (
    MAX_FILTER_CHARS,
    MAX_GROUP_LENGTH,
    MAX_TOPIC_LENGTH,
    TOPIC_NAME_PATTERN,
    check_group_name,
    parse_timestamp_ms,
)
from storage.record.message import GetMessageStatus

TOPIC_PATTERN: Final = TOPIC_NAME_PATTERN
TOPIC_MAX_LENGTH: Final = MAX_TOPIC_LENGTH
GROUP_MAX_LENGTH: Final = MAX_GROUP_LENGTH
MAX_QUEUES: Final = 1024
MAX_BATCH_MESSAGES: Final = 1000
MAX_PROPERTIES: Final = 64
MAX_KEYS: Final = 64
MAX_DELAY_LEVEL: Final = 64  # the server's delay table decides; 18 levels by default
INT64_MAX: Final = 2**63 - 1

PullStatus = Literal[
    "FOUND",
    "NO_MATCHED_MESSAGE",
    "MESSAGE_WAS_REMOVING",
    "OFFSET_FOUND_NULL",
    "OFFSET_OVERFLOW_BADLY",
    "OFFSET_OVERFLOW_ONE",
    "OFFSET_TOO_SMALL",
    "NO_MATCHED_LOGIC_QUEUE",
    "NO_MESSAGE_IN_QUEUE",
]
assert set(PullStatus.__args__) == {s.value for s in GetMessageStatus}  # type: ignore[attr-defined]


def _whole_float_as_int(value: Any) -> Any:
    """``4.0`` becomes ``4``; anything else goes on to the strict integer check unchanged."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_whole_float_as_int)]
"""An integer of a JSON body: ``4`` or ``4.0``, never ``4.5``, ``"4"`` or ``true``. Its JSON
schema is still ``integer``."""

_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")


def _decimal_only(value: Any) -> Any:
    """A parameter's text must be a decimal integer: ``+0.0`` or ``1_000`` is not one."""
    if isinstance(value, str):
        if value.isdigit() and value.isascii():  # 0-9 alone (a pull's numbers): no match needed
            return int(value)
        if _DECIMAL.fullmatch(value) is None:
            raise PydanticCustomError(
                "int_parsing",
                "Input should be a valid integer, unable to parse string as an integer",
            )
        return int(value)
    return value


ParamInt = Annotated[int, BeforeValidator(_decimal_only)]
"""An integer of a path or query parameter: decimal digits with an optional sign only."""


def _timestamp(value: Any) -> Any:
    """Text (a query parameter, or a JSON string) is epoch ms or ISO 8601; a JSON number is
    epoch ms as for :data:`JsonInt`. An ISO time of 1 January 1970 that its zone puts before
    the epoch is the epoch (the document allows any time written in 1970 or later)."""
    if isinstance(value, str):
        try:
            moment = parse_timestamp_ms(value)
        except ValueError as exc:
            raise PydanticCustomError(
                "timestamp_parsing", "{reason}", {"reason": str(exc)}
            ) from None
        if -_ZONE_OFFSET_MAX_MS < moment < 0 and not _EPOCH_MS_TEXT.fullmatch(value):
            return 0
        return moment
    return _whole_float_as_int(value)


_ZONE_OFFSET_MAX_MS: Final = 24 * 3_600_000
_EPOCH_MS_TEXT: Final = re.compile(r"[+-]?[0-9]+")
ISO_SINCE_1970: Final = r"^(19[7-9][0-9]|[2-9][0-9]{3})-"
"""An ISO 8601 time written in 1970 or later (the pattern of a timestamp's text form)."""

TIMESTAMP_DESCRIPTION: Final = (
    "Milliseconds since the epoch, or an ISO 8601 time in 1970 or later "
    "(`2024-05-01T12:00:00Z`; UTC without a zone)."
)
TimestampMs = Annotated[
    int,
    BeforeValidator(_timestamp),
    Field(ge=0, le=INT64_MAX),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
                {"type": "string", "format": "date-time", "pattern": ISO_SINCE_1970},
            ],
            "description": TIMESTAMP_DESCRIPTION,
        }
    ),
]
"""A point in time, in a parameter or a JSON body: epoch ms or ISO 8601 (one parser for every
route and the Spark jobs: :func:`services.parse_timestamp_ms`)."""

TopicName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=TOPIC_MAX_LENGTH, pattern=TOPIC_PATTERN),
]
ShortText = Annotated[str, StringConstraints(min_length=1, max_length=255)]


def text_schema(max_length: int, pattern: str, **more: Any) -> dict[str, Any]:
    """The JSON schema of a non-empty text up to ``max_length`` matching ``pattern`` (and
    ``more``): what a text type documents of the rules its service checks."""
    return {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": pattern, **more}


KEY_RULES: Final = (
    "A key is 1 to 255 characters, without spaces (they separate keys in the KEYS property) "
    "and without the control characters U+0001 and U+0002 (RocketMQ's property separators); "
    "422 INVALID_PROPERTY otherwise."
)
MessageKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255),
    WithJsonSchema(text_schema(255, "^[^ \\u0001\\u0002]+$", description=KEY_RULES)),
]
"""A business key (checked by the send service; the schema documents the rule)."""
SEPARATOR_FREE: Final = "^[^\\u0001\\u0002]+$"
"""Text without RocketMQ's property separators U+0001 and U+0002 (a tag, a property)."""
TAG_RULES: Final = (
    "One tag; consumers filter on it (`A||B`). 1 to 255 characters, without `||` and without "
    "the control characters U+0001 and U+0002."
)
Tag = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255),
    # no "||" (every "|" is followed by another character or ends the text), no separators
    WithJsonSchema(text_schema(255, "^(?:\\|?[^|\\u0001\\u0002])*\\|?$", description=TAG_RULES)),
]
"""A message's tag (checked by the send service; the schema documents the rule)."""
FILTER_RULES: Final = (
    "A SQL92 filter on the messages' properties (TAGS and KEYS included), in RocketMQ's "
    "grammar: `=`, `<>`, `<`, `<=`, `>`, `>=`, `[NOT] BETWEEN`, `[NOT] IN ('a', 'b')`, "
    "`IS [NOT] NULL`, `[NOT] CONTAINS`, `[NOT] STARTSWITH`, `[NOT] ENDSWITH`, `AND`, `OR`, "
    "`NOT`, strings in single quotes. A property's text is converted to the type of the "
    "number or boolean it is compared with (a value that does not convert, or a missing "
    "property, does not match). Example: `region = 'eu' AND amount > 100`. Messages that do "
    "not match are skipped and the offsets move past them; retries are filtered too. One that "
    "does not parse is `400 INVALID_FILTER`, naming where."
)
SqlFilter = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_FILTER_CHARS, strip_whitespace=False)
]
"""A SQL92 filter's text (parsed by the services: a bad one is INVALID_FILTER)."""
FilterType = Literal["sql92"]
"""The languages of ``filter``: RocketMQ's SQL92 (tags have their own parameter)."""
PropertyValue = Annotated[
    str,
    StringConstraints(min_length=1, max_length=16_384),
    WithJsonSchema(text_schema(16_384, SEPARATOR_FREE)),
]

checked_group_name: Final = check_group_name
"""The group name, or InvalidGroupNameError (400): a full match, so ``"g\n"`` is refused."""


GroupName = Annotated[
    str,
    AfterValidator(checked_group_name),
    WithJsonSchema(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": GROUP_MAX_LENGTH,
            "pattern": TOPIC_PATTERN,
            "description": f"Consumer group name: 1 to {GROUP_MAX_LENGTH} of "
            "`a-z A-Z 0-9 _ - % |`.",
        }
    ),
]
"""A consumer group name where a parameter carries one; a bad one is INVALID_GROUP_NAME."""


class RequestBody(BaseModel):
    """Base of request bodies: strict types, unknown fields rejected."""

    model_config = ConfigDict(strict=True, extra="forbid")


def validated_dicts(model: type[RequestBody], fields: dict[str, Any] | None = None) -> Any:
    """A TypedDict of ``model``'s fields (each field's type and constraints as the model
    declares them, the model's config, no defaults filled in): validating with it accepts
    exactly what the model accepts and gives dicts instead of instances, a fraction of the
    cost per item. ``fields``: types to use instead of some fields' own (a nested model's
    TypedDict). Validator methods are not carried over: a model with any is refused."""
    decorators = model.__pydantic_decorators__
    if decorators.model_validators or decorators.field_validators or decorators.validators:
        raise TypeError(f"{model.__name__} has validator methods a TypedDict would not run")
    items: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        kind = (fields or {}).get(name, field.annotation)
        if field.metadata:
            kind = Annotated[(kind, *field.metadata)]
        items[name] = kind if field.is_required() else NotRequired[kind]
    typed = TypedDict(f"{model.__name__}Dict", items)  # type: ignore[misc]
    return with_config(model.model_config)(typed)


class ResponseBody(BaseModel):
    """Base of response bodies: a field with a default is still always sent, so required."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)


class PageBody(ResponseBody):
    """What every page of a list says besides its items."""

    total: int = Field(description="Items in the whole list, not only on this page.")
    next_after: str | None = Field(
        description="Pass as `after` for the next page; null on the last page."
    )


# ==================================================================== health and errors


class HealthResponse(ResponseBody):
    status: Literal["ok"]


class ReadyResponse(ResponseBody):
    status: Literal["ready"]
    state: str
    parked_pulls: int


class FieldError(ResponseBody):
    loc: list[str | int] = Field(description="Where: body, query, path or header, then names.")
    msg: str
    type: str


class Problem(BaseModel):
    """RFC 9457 problem details, plus a stable ``code`` and the request id.

    ``errors`` is sent with validation failures (422) only, so it stays optional.
    """

    type: str = Field(description="A URI naming the problem type (urn:spoolmq:problem:<code>).")
    title: str
    status: int
    detail: str
    code: str = Field(description="Stable, machine-readable error code, e.g. TOPIC_NOT_FOUND.")
    instance: str = Field(description="The request path.")
    request_id: str
    errors: list[FieldError] | None = Field(default=None, description="Field errors of a 422.")
