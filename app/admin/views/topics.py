"""Topics: list with search and kind filter, create, edit queues and perm, queue offsets,
send a test message, delete. Every change goes through :class:`services.topics.TopicService`
and :class:`services.send.SendService`, as ``/v1/topics`` does."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.forms import Form, FormError
from app.admin.lag import group_lag, group_names
from app.admin.paging import Pager, page_of
from app.admin.problems import AdminRoute
from app.admin.rendering import PREFIX, redirect, render
from app.deps import BrokerDep, born_host
from services import (
    SYSTEM_TOPICS,
    Broker,
    OutgoingMessage,
    QueueStats,
    TopicConfig,
    is_dlq_topic,
    is_retry_topic,
)

router = APIRouter(route_class=AdminRoute)

PERM_CHOICES = (
    (6, "6 — read and write"),
    (4, "4 — read only"),
    (2, "2 — write only"),
    (0, "0 — none"),
)


class TopicKind(Enum):
    NORMAL = "normal"
    RETRY = "retry"
    DLQ = "dlq"
    SYSTEM = "system"


def topic_kind(topic: str) -> TopicKind:
    if topic in SYSTEM_TOPICS:
        return TopicKind.SYSTEM
    if is_retry_topic(topic):
        return TopicKind.RETRY
    if is_dlq_topic(topic):
        return TopicKind.DLQ
    return TopicKind.NORMAL


@dataclass(frozen=True, slots=True)
class TopicRow:
    config: TopicConfig
    kind: TopicKind
    queues: list[QueueStats]

    @property
    def name(self) -> str:
        return self.config.topic_name

    @property
    def messages(self) -> int:
        """Messages still stored (max - min over the queues)."""
        return sum(q.max_offset - q.min_offset for q in self.queues)

    @property
    def last_store_timestamp(self) -> int:
        return max((q.last_store_timestamp for q in self.queues), default=0)


def topic_rows(
    broker: Broker, search: str = "", kind: str = "", after: str = ""
) -> tuple[list[TopicRow], Pager]:
    """One page of the topics matching the search and kind, with their queues' figures
    (read for the page's topics only)."""
    needle = search.lower()
    configs = {
        config.topic_name: config
        for config in broker.topics.all()
        if (not needle or needle in config.topic_name.lower())
        and (not kind or topic_kind(config.topic_name).value == kind)
    }
    pager = page_of(sorted(configs), after, {"q": search, "kind": kind})
    rows = [
        TopicRow(configs[name], topic_kind(name), broker.topics.queue_stats(configs[name]))
        for name in pager.names
    ]
    return rows, pager


def topic_url(topic: str) -> str:
    return f"{PREFIX}/topics/{quote(topic, safe='')}"


# ==================================================================== list and create


@router.get("/topics", name="admin-topics")
async def list_topics(request: Request, broker: BrokerDep) -> Response:
    query = Form.query(request.query_params)
    search, kind = query.text("q"), query.text("kind")
    rows, pager = topic_rows(broker, search, kind, query.raw("after"))
    context = {
        "title": "Topics",
        "nav": "topics",
        "rows": rows,
        "pager": pager,
        "search": search,
        "kind": kind,
        "kinds": [k.value for k in TopicKind],
        "perm_choices": PERM_CHOICES,
        "deleted": query.text("deleted"),
        "max_queues": broker.topics.max_queues,
    }
    return render(request, "topics.html", context, fragment="_topic_list.html")


@router.post("/topics", name="admin-topic-create")
async def create_topic(request: Request, broker: BrokerDep) -> Response:
    form = await Form.posted(request)
    topic = form.required("topic", "Topic name")
    if topic in {c.topic_name for c in broker.topics.all()}:
        raise FormError("topic", f"topic {topic!r} already exists: open it to change it")
    await _put_topic(broker, topic, form)
    return redirect(request, topic_url(topic) + "?created=1")


async def _put_topic(broker: Broker, topic: str, form: Form) -> TopicConfig:
    config, _ = await broker.topics.put(
        topic,
        read_queue_nums=form.integer("read_queue_nums", "Read queues", 8),
        write_queue_nums=form.integer("write_queue_nums", "Write queues", 8),
        perm=form.integer("perm", "Permission", 6),
        order=form.text("order") == "on",
    )
    return config


# ==================================================================== one topic


def _detail_context(broker: Broker, topic: str) -> dict[str, object]:
    config = broker.topics.get(topic)
    queues = broker.topics.queue_stats(config)
    consumers = []
    for group in group_names(broker):
        lag = group_lag(broker, group, topic)
        if lag.rows:
            consumers.append(lag)
    return {
        "topic": topic,
        "config": config,
        "kind": topic_kind(topic),
        "row": TopicRow(config, topic_kind(topic), queues),
        "queues": queues,
        "consumers": consumers,
        "perm_choices": PERM_CHOICES,
        "max_queues": broker.topics.max_queues,
    }


@router.get("/topics/{topic}", name="admin-topic")
async def show_topic(request: Request, topic: str, broker: BrokerDep) -> Response:
    context = _detail_context(broker, topic)
    query = Form.query(request.query_params)
    context.update(title=f"Topic {topic}", nav="topics", created=query.text("created") == "1")
    return render(request, "topic.html", context)


@router.get("/topics/{topic}/queues", name="admin-topic-queues")
async def topic_queues(request: Request, topic: str, broker: BrokerDep) -> Response:
    """The queue table alone (refreshed after a change or a send)."""
    return render(request, "_topic_queues.html", _detail_context(broker, topic))


@router.post("/topics/{topic}/config", name="admin-topic-update")
async def update_topic(request: Request, topic: str, broker: BrokerDep) -> Response:
    form = await Form.posted(request)
    broker.topics.get(topic)  # editing never creates
    config = await _put_topic(broker, topic, form)
    return render(
        request,
        "_topic_saved.html",
        {"config": config},
        headers={"HX-Trigger": "topic-changed"},
    )


@router.post("/topics/{topic}/messages", name="admin-topic-send")
async def send_test_message(request: Request, topic: str, broker: BrokerDep) -> Response:
    form = await Form.posted(request)
    broker.topics.get(topic)  # a test message never auto-creates a topic
    message = OutgoingMessage(
        body=form.raw("body").encode(),
        tags=form.text("tags") or None,
        keys=tuple(form.words("keys")),
        properties=_properties(form.text("properties")),
        queue_id=form.optional_integer("queue_id", "Queue"),
    )
    receipts = await broker.send.send(topic, [message], born_host=born_host(request))
    return render(
        request,
        "_topic_sent.html",
        {"receipt": receipts[0]},
        headers={"HX-Trigger": "topic-changed"},
    )


def _properties(text: str) -> dict[str, str]:
    """``name=value`` per line."""
    properties = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise FormError("properties", f"line {number} of the properties is not name=value")
        properties[name.strip()] = value.strip()
    return properties


@router.post("/topics/{topic}/delete", name="admin-topic-delete")
async def delete_topic(request: Request, topic: str, broker: BrokerDep) -> Response:
    await broker.topics.delete(topic)
    return redirect(request, f"{PREFIX}/topics?deleted={quote(topic, safe='')}")
