"""The permission table: what each route needs, keyed by operationId (or route name).

A route missing from :data:`RULES` needs ``admin``: a new route is closed until someone
decides who may call it. Everything a rule looks at is known before the route runs (path
and query parameters, a small JSON body), so a caller without the permission gets 403
whether or not the topic or group exists.

``/admin`` pages are not in the table: they need an admin (a session cookie from the login
form, or an admin bearer token), and CSRF tokens on every state-changing request.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal


class Access(Enum):
    """What a caller needs."""

    PUBLIC = "public"  # nothing: no token is needed
    AUTHENTICATED = "authenticated"  # any valid token
    PRODUCE = "produce"  # produce on the topic
    CONSUME = "consume"  # consume the topic with the group (an absent one: any)
    SEE_TOPIC = "see_topic"  # produce on the topic, or consume it with some group
    PRODUCER_GROUP = "producer_group"  # send transactions as the group
    ADMIN = "admin"


class BodyCheck(Enum):
    """A check that needs the request body or a message's topic (still before the route)."""

    OFFSET_TOPICS = "offset_topics"  # each offsets[].topic: consume with the path's group
    SENT_BACK_MESSAGE = "sent_back_message"  # the message's original topic, with the group
    MESSAGE_BY_ID = "message_by_id"  # the message's topic, with any group
    TRANSACTION = "transaction"  # the transaction's topic and producer group (looked up)
    HALF_MESSAGE = "half_message"  # the body's producer_group (the topic is the path's)


@dataclass(frozen=True, slots=True)
class Param:
    """Where a name comes from: a path parameter or a query parameter."""

    where: Literal["path", "query"]
    name: str


TOPIC: Final = Param("path", "topic")
GROUP: Final = Param("path", "group")


@dataclass(frozen=True, slots=True)
class Rule:
    """What one route needs, and what else it does."""

    access: Access
    topic: Param | None = None  # None: any topic
    group: Param | None = None  # None: any group
    body: BodyCheck | None = None
    pull: bool = False  # a pull: max_bytes capped; wait_ms > 0 counts as a parked long-poll
    # A POP receive: "wait_ms" > 0 in its JSON body counts as a parked long-poll.
    long_poll_in_body: bool = False
    dry_run_in_body: bool = False  # {"dry_run": true} is not an action (not audited)
    browser: bool = False  # an admin session cookie also authenticates GET requests

    @property
    def admin(self) -> bool:
        return self.access is Access.ADMIN

    @property
    def reads_query(self) -> bool:
        """Whether checking it needs the query string."""
        params = (self.topic, self.group)
        return self.pull or any(p is not None and p.where == "query" for p in params)


ADMIN_RULE: Final = Rule(Access.ADMIN)
"""The rule of every route the table does not name."""

RULES: Final[dict[str, Rule]] = {
    # ---------------------------------------------------------------- messages
    "sendMessages": Rule(Access.PRODUCE, topic=TOPIC),
    "pullMessages": Rule(Access.CONSUME, topic=TOPIC, group=Param("query", "group"), pull=True),
    "readQueueRecords": Rule(Access.CONSUME, topic=TOPIC, group=Param("query", "group")),
    "queryMessagesByKey": Rule(Access.CONSUME, topic=TOPIC),
    "getMessage": Rule(Access.CONSUME, body=BodyCheck.MESSAGE_BY_ID),
    "getDelayLevels": Rule(Access.AUTHENTICATED),
    "cancelTimer": Rule(Access.PRODUCE, topic=TOPIC),
    "getTimerStatus": Rule(Access.AUTHENTICATED),
    # ---------------------------------------------------------------- topics
    "listTopics": ADMIN_RULE,  # names every topic
    "getTopic": Rule(Access.SEE_TOPIC, topic=TOPIC),
    "putTopic": ADMIN_RULE,
    "deleteTopic": ADMIN_RULE,
    "getOffsetByTime": Rule(Access.CONSUME, topic=TOPIC),
    # ---------------------------------------------------------------- groups
    "listGroups": ADMIN_RULE,
    "getGroup": Rule(Access.CONSUME, group=GROUP),
    "putGroup": ADMIN_RULE,
    "deleteGroup": ADMIN_RULE,
    "pullGroupMessages": Rule(Access.CONSUME, topic=TOPIC, group=GROUP, pull=True),
    "commitOffset": Rule(Access.CONSUME, topic=TOPIC, group=GROUP),
    "commitOffsets": Rule(Access.CONSUME, group=GROUP, body=BodyCheck.OFFSET_TOPICS),
    "getGroupOffsets": Rule(Access.CONSUME, group=GROUP, topic=Param("query", "topic")),
    # ---------------------------------------------------------------- redelivery (issue 5)
    # send-back: consume with the group, and the message's original topic (looked up)
    "sendBack": Rule(Access.CONSUME, group=GROUP, body=BodyCheck.SENT_BACK_MESSAGE),
    "listDeadLetters": Rule(Access.CONSUME, group=GROUP),
    "redriveDeadLetters": Rule(Access.ADMIN, dry_run_in_body=True),
    "createRedriveJob": Rule(Access.ADMIN, dry_run_in_body=True),
    "listRedriveJobs": ADMIN_RULE,
    "getRedriveJob": ADMIN_RULE,
    "cancelRedriveJob": ADMIN_RULE,
    "deleteRedriveJob": ADMIN_RULE,
    "resetOffsets": Rule(Access.ADMIN, dry_run_in_body=True),
    # ---------------------------------------------------------------- POP (issue 12)
    "receiveMessages": Rule(Access.CONSUME, topic=TOPIC, group=GROUP, long_poll_in_body=True),
    "ackMessages": Rule(Access.CONSUME, group=GROUP),
    "changeInvisibility": Rule(Access.CONSUME, group=GROUP),
    "listInFlight": ADMIN_RULE,  # names the receivers' tokens, of every topic of the group
    # ---------------------------------------------------------------- transactions
    # produce on the topic, and the producer group of the body
    "sendHalfMessage": Rule(Access.PRODUCE, topic=TOPIC, body=BodyCheck.HALF_MESSAGE),
    "getTransaction": Rule(Access.AUTHENTICATED, body=BodyCheck.TRANSACTION),
    "commitTransaction": Rule(Access.AUTHENTICATED, body=BodyCheck.TRANSACTION),
    "rollbackTransaction": Rule(Access.AUTHENTICATED, body=BodyCheck.TRANSACTION),
    "answerTransactionUnknown": Rule(Access.AUTHENTICATED, body=BodyCheck.TRANSACTION),
    "listTransactions": ADMIN_RULE,  # names every open transaction
    # the producer group; a poll gets only checks of topics it may produce to
    "pollTransactionChecks": Rule(Access.PRODUCER_GROUP, group=GROUP, long_poll_in_body=True),
    # ---------------------------------------------------------------- health and docs
    "healthz": Rule(Access.PUBLIC),
    "readyz": Rule(Access.PUBLIC),
    "metrics": Rule(Access.AUTHENTICATED),
    "openapi": Rule(Access.AUTHENTICATED, browser=True),
    "swagger_ui": Rule(Access.AUTHENTICATED, browser=True),
    "redoc": Rule(Access.AUTHENTICATED, browser=True),
    "static": Rule(Access.PUBLIC),  # vendored Swagger UI and ReDoc files
    "favicon": Rule(Access.PUBLIC),  # the icon a browser asks every site for
}
"""Rules by operationId (FastAPI routes) or route name (other routes)."""

SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})


def rule_for(key: str | None) -> Rule:
    """The rule of a route; admin for a route the table does not name."""
    if key is None:
        return ADMIN_RULE
    return RULES.get(key, ADMIN_RULE)


def is_audited(rule: Rule, method: str) -> bool:
    """Admin actions are audited: state-changing requests to admin routes."""
    return rule.admin and method not in SAFE_METHODS
