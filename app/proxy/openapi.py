"""The proxy's OpenAPI document: the broker's document machinery (:func:`app.openapi.build_openapi`:
problem answers per operation, security, request ids) over the proxy's own routes, with the
codes the proxy answers itself (:data:`app.problem_codes.PROXY_CODES`) and the request bodies
it forwards (:data:`app.proxy.schemas.BODY_MODELS`)."""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI
from pydantic.json_schema import models_json_schema

from app.openapi import build_openapi
from app.proxy.schemas import BODY_MODELS

DESCRIPTION: Final = """\
A stateless proxy in front of a spoolmq cluster's broker groups: one address for every topic.
Its route table comes from etcd; each request goes to the master of the broker group that holds
what it names (a read to a slave when the master does not answer), or to every group hosting a
topic, whose answers it merges.

Queue ids are cluster-wide: a topic's queues are spread over its broker groups, and its route
(`GET /v1/topics/{topic}/route`) says which group holds each. Answers name the `broker_group`
of a send, of each message and queue of a group pull, and of each transaction; transaction ids
and POP receipt handles name their group (`<group>~<id>`), so any proxy sends their follow-ups
to it. The proxy asks the brokers for those labels itself (the `Spoolmq-Broker-Group` and
`Spoolmq-Queue-Ids` request headers); a client's own are not passed on.

The brokers check requests as their own document says, and their refusals pass through. The
proxy adds its own answers: 503 BROKER_UNAVAILABLE with `Retry-After` when a broker group does
not answer or has no master, 504 OUTCOME_UNKNOWN when a send may or may not have been stored,
409 ROUTE_CONFLICT and 503 ETCD_UNAVAILABLE when a topic's route cannot be stored. Tokens go to
the brokers, which check them.

Errors are `application/problem+json` with a stable `code`; every response carries
`X-Request-Id`, which the brokers' answers and logs name too.
"""

TAGS: Final[list[dict[str, Any]]] = [
    {"name": "messages", "description": "Send, pull and look up messages across groups."},
    {"name": "topics", "description": "Topics spread over broker groups, their routes."},
    {"name": "groups", "description": "Consumer groups: configs, group pulls, offsets."},
    {"name": "transactions", "description": "Transactional messages, held by one group each."},
    {"name": "health", "description": "The proxy and the route table it follows."},
]


def proxy_openapi(app: FastAPI) -> dict[str, Any]:
    """The proxy app's document (cached on the app)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = build_openapi(app, proxied=True)
    components = schema["components"]["schemas"]
    _, forwarded = models_json_schema(
        [(model, "validation") for model in BODY_MODELS],
        ref_template="#/components/schemas/{model}",
    )
    for name, definition in forwarded.get("$defs", {}).items():
        components.setdefault(name, definition)
    schema["components"]["schemas"] = dict(sorted(components.items()))
    return schema
