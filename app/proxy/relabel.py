"""A broker group's answer to a fanned-out group pull or POP receive, made the proxy's without
decoding it: each message and queue gets ``broker_group`` (its last member), the routed topic's
queue ids become cluster-wide, and a POP message's receipt handle gets its group in front.

A 32-message answer is ~40 KB, almost all of it bodies; decoding it into Python objects and
encoding it again cost more than the rest of the proxy's work on it. The broker renders these
answers with orjson in a fixed layout (every message opens with ``msg_id``, then ``topic`` and
``queue_id``), and everything a client put in a message is inside a JSON string, where a quote is
always escaped. So a pattern holding an unescaped quote (``},{"msg_id":"``) meets only the
answer's own structure, and the relabelling is a few C-speed passes over the bytes:

* ``},{"msg_id":"`` (between two messages) gets ``,"broker_group":"g1"`` in front, as does the
  last message's closing brace; how much longer the text grew says how many messages there are;
* ``"receipt_handle":"`` gets the group and ``~`` after it (a POP answer); it must grow by as much
  as there are messages, else a property of that name was met;
* in a group whose local queue ids are not the cluster-wide ones, the text is split at each
  ``"topic":<topic>,"queue_id":`` and the number after it mapped; there must be one per message.

Anything else — another layout, a retry message (``queue_topic``) where ids change, a count that
does not add up — is decoded and encoded as before (:func:`decoded_pull`,
:func:`decoded_receive`); both ways give the same bytes (tests/app/test_proxy_relabel.py).
The queues of a group pull are a few hundred bytes: decoded always.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from app.proxy.forward import BrokerAnswer
from services.cluster import TopicRoute, globalize, merge_group_pulls, prefix_handle

BOUNDARY: Final = b'},{"msg_id":"'
"""Between two messages of an answer: the only place these bytes can be."""
FIRST: Final = b'{"msg_id":"'
QUEUES: Final = b'],"queues":['
HANDLE: Final = b'"receipt_handle":"'
RETRY_MEMBER: Final = b'"queue_topic":'


@dataclass(frozen=True, slots=True)
class Relabelled:
    """One broker group's answer as the proxy passes it on."""

    broker_group: str
    answer: BrokerAnswer
    """As the broker gave it (local queue ids): what a commit of delivered offsets reads."""
    messages: bytes
    """The messages' JSON objects, comma-separated (no brackets); empty for none."""
    count: int
    queues: bytes = b""
    """A group pull's queues, likewise."""

    def json(self) -> Any:
        return self.answer.json()


def relabel_pull(answer: BrokerAnswer, route: TopicRoute, name: str, group: str) -> Relabelled:
    """Broker group ``name``'s answer to consumer group ``group``'s pull of ``route``."""
    return pull_bytes(answer, route, name, group) or decoded_pull(answer, route, name, group)


def relabel_receive(answer: BrokerAnswer, route: TopicRoute, name: str, group: str) -> Relabelled:
    """Broker group ``name``'s answer to consumer group ``group``'s POP receive of ``route``."""
    return receive_bytes(answer, route, name, group) or decoded_receive(answer, route, name)


def pull_bytes(answer: BrokerAnswer, route: TopicRoute, name: str, group: str) -> Relabelled | None:
    """:func:`relabel_pull` at the byte level; None when the answer is not as expected."""
    content = answer.content
    head = _head(group, route.topic)
    split = content.rfind(QUEUES)
    if not content.startswith(head) or split < len(head) or not content.endswith(b"]}"):
        return None
    messages = _messages(content[len(head) : split], route, name)
    if messages is None:
        return None
    queues = orjson.loads(b"[" + content[split + len(QUEUES) : -2] + b"]")
    merged = merge_group_pulls(route, [(name, {"queues": queues})], group)
    return Relabelled(name, answer, *messages, _items(merged["queues"]))


def receive_bytes(
    answer: BrokerAnswer, route: TopicRoute, name: str, group: str
) -> Relabelled | None:
    """:func:`relabel_receive` at the byte level; None when the answer is not as expected."""
    content = answer.content
    head = _head(group, route.topic)
    if not content.startswith(head) or not content.endswith(b"]}"):
        return None
    messages = _messages(content[len(head) : -2], route, name)
    if messages is None:
        return None
    text, count = messages
    prefix = orjson.dumps(prefix_handle(name, ""))[1:-1]
    handled = text.replace(HANDLE, HANDLE + prefix)
    if len(handled) - len(text) != count * len(prefix):
        return None  # a property named receipt_handle
    return Relabelled(name, answer, handled, count)


def decoded_pull(answer: BrokerAnswer, route: TopicRoute, name: str, group: str) -> Relabelled:
    """:func:`relabel_pull` by decoding the answer and encoding it again."""
    merged = merge_group_pulls(route, [(name, answer.json())], group)
    messages = merged["messages"]
    return Relabelled(name, answer, _items(messages), len(messages), _items(merged["queues"]))


def decoded_receive(answer: BrokerAnswer, route: TopicRoute, name: str) -> Relabelled:
    """:func:`relabel_receive` by decoding the answer and encoding it again."""
    messages = answer.json().get("messages") or []
    for message in messages:
        message["receipt_handle"] = prefix_handle(name, message["receipt_handle"])
        message["broker_group"] = name
    globalize(route, name, messages)
    return Relabelled(name, answer, _items(messages), len(messages))


def merged_pull(group: str, route: TopicRoute, answers: Sequence[Relabelled]) -> bytes:
    """One group pull answer from each broker group's (:func:`merge_group_pulls`' JSON)."""
    messages = b",".join(a.messages for a in answers if a.messages)
    queues = b",".join(a.queues for a in answers if a.queues)
    return b"%s%s%s%s]}" % (_head(group, route.topic), messages, QUEUES, queues)


def merged_receive(group: str, topic: str, answers: Sequence[Relabelled]) -> bytes:
    """One POP receive answer from each broker group's."""
    messages = b",".join(a.messages for a in answers if a.messages)
    return b"%s%s]}" % (_head(group, topic), messages)


def _head(group: str, topic: str) -> bytes:
    return b'{"group":%s,"topic":%s,"messages":[' % (orjson.dumps(group), orjson.dumps(topic))


def _messages(text: bytes, route: TopicRoute, name: str) -> tuple[bytes, int] | None:
    """The messages' objects with ``broker_group`` last and cluster-wide queue ids, and how
    many there are; None when the text is not as expected."""
    if not text:
        return b"", 0
    if not text.startswith(FIRST) or not text.endswith(b"}"):
        return None
    tag = b',"broker_group":' + orjson.dumps(name)
    tagged = text.replace(BOUNDARY, tag + BOUNDARY)
    count = (len(tagged) - len(text)) // len(tag) + 1
    tagged = tagged[:-1] + tag + b"}"
    changed = _changed_ids(route, name)
    if not changed:
        return tagged, count
    globalized = _globalized(tagged, route.topic, changed, count)
    return None if globalized is None else (globalized, count)


def _changed_ids(route: TopicRoute, name: str) -> dict[int, int]:
    """``name``'s local queue ids whose cluster-wide id differs (``TopicRoute.global_id``)."""
    ids: dict[int, int] = {}
    for queue in route.queues:
        if queue.group == name:
            ids.setdefault(queue.local_queue_id, queue.queue_id)
    return {local: cluster for local, cluster in ids.items() if local != cluster}


def _globalized(text: bytes, topic: str, changed: Mapping[int, int], count: int) -> bytes | None:
    """Each message's queue id mapped; None unless each of the ``count`` messages is of
    ``topic`` itself (a retry message keeps its broker's id: decoded instead)."""
    if RETRY_MEMBER in text:
        return None
    marker = b'"topic":' + orjson.dumps(topic) + b',"queue_id":'
    parts = text.split(marker)
    if len(parts) != count + 1:
        return None
    for index in range(1, len(parts)):
        part = parts[index]
        end = part.find(b",")
        number = part[:end]
        if end < 1 or not number.isdigit():
            return None
        cluster = changed.get(int(number))
        if cluster is not None:
            parts[index] = b"%d%s" % (cluster, part[end:])
    return marker.join(parts)


def _items(items: list[dict[str, Any]]) -> bytes:
    return orjson.dumps(items)[1:-1]
