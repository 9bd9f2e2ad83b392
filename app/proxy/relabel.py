"""A broker group's answer to a fanned-out group pull or POP receive, made the proxy's without
decoding it: each message and queue gets ``broker_group`` (its last member), the routed topic's
queue ids become cluster-wide, and a POP message's receipt handle gets its group in front.

A 32-message answer is ~40 KB, almost all of it bodies; decoding it into Python objects and
encoding it again cost more than the rest of the proxy's work on it. The broker renders these
answers with orjson in a fixed layout (``{"group":…,"topic":…,"messages":[…]`` and, for a pull,
``"queues":[…]}``; every message opens with ``msg_id``, ``topic``, ``queue_id`` and ends, after
its properties, with the POP members), and everything a client put in a message is inside a JSON
string, where a quote is always escaped. So a pattern holding an unescaped quote meets only the
answer's own structure:

* ``},{"msg_id":"`` is found only between two messages (searched backwards: CPython's reverse
  search measured faster here than its forward one, which takes the two-way algorithm past
  30 KB), which cuts the text into its messages; each gets ``,"broker_group":"g1"`` before its
  closing brace;
* in a group whose local queue ids are not the cluster-wide ones, the first
  ``"topic":<topic>,"queue_id":`` of a message is its own (its properties come later, and their
  values are strings): the number after it is mapped;
* the last ``"receipt_handle":"`` of a POP message is its own (after its properties): the group
  and ``~`` go in front of the handle.

The answer is then joined from views of the broker's bytes and the pieces put in: one copy.
In a group whose queue ids are the cluster-wide ones (no number to map) the tags, and the
handles' prefixes when the answer holds no more handle patterns than messages, go in by
``rsplit`` and ``join`` over the whole answer instead: C loops and a copy or two, where Python
steps per message cost more than the search itself. Those joins make the client's answer
whole (:attr:`Relabelled.whole`): when it is the only one it is passed on as it is, not
joined again from its pieces.
Anything else — another layout, a message of another topic or a retry message (``queue_topic``)
where ids change — is decoded and encoded as before (:func:`decoded_pull`,
:func:`decoded_receive`); both ways give the same bytes (tests/app/test_proxy_relabel.py,
tests/app/test_proxy_relabel_layouts.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from app.proxy.forward import BrokerAnswer
from services.cluster import TopicRoute, globalize, merge_group_pulls, prefix_handle

Piece = bytes | memoryview

BOUNDARY: Final = b'},{"msg_id":"'
"""Between two messages of an answer: the only place these bytes can be."""
FIRST: Final = b'{"msg_id":"'
QUEUES: Final = b'],"queues":['
QUEUE_BOUNDARY: Final = b'},{"topic":'
HANDLE: Final = b'"receipt_handle":"'
_CLOSE: Final = ord("}")
RETRY_MEMBER: Final = b'"queue_topic":'


@dataclass(slots=True)
class Relabelled:
    """One broker group's answer as the proxy passes it on; read only (not frozen: a frozen
    dataclass's fields are set by calls, a cost per answer on the proxy's hot path)."""

    broker_group: str
    answer: BrokerAnswer
    """As the broker gave it (local queue ids): what a commit of delivered offsets reads."""
    messages: list[Piece]
    """The messages' JSON objects, comma-separated, in pieces (no brackets); none: empty."""
    count: int
    queues: list[Piece]
    """A group pull's queues, likewise."""
    whole: bytes | None = None
    """The client's answer when this is the only one: its pieces are views of it."""

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
    start, split = len(head), content.rfind(QUEUES)
    if split < start or not content.endswith(b"]}") or not content.startswith(head):
        return None
    changed = route.renumbered(name)
    if not changed and start < split:  # the usual case: the answer in one join
        return _pull_whole(answer, head, split, name)
    messages = _Messages(content, start, split, route.topic, name, changed).pieces(handles=False)
    if messages is None:
        return None
    queues = _queues(content[split + len(QUEUES) : -2], route.topic, name, changed)
    if queues is None:
        return None
    return Relabelled(name, answer, messages[0], messages[1], queues)


def receive_bytes(
    answer: BrokerAnswer, route: TopicRoute, name: str, group: str
) -> Relabelled | None:
    """:func:`relabel_receive` at the byte level; None when the answer is not as expected."""
    content = answer.content
    head = _head(group, route.topic)
    if not content.endswith(b"]}") or not content.startswith(head):
        return None
    changed = route.renumbered(name)
    if not changed and len(head) < len(content) - 2:  # the usual case: the answer in one join
        whole = _receive_whole(answer, head, name)
        if whole is not None:
            return whole
    messages = _Messages(content, len(head), len(content) - 2, route.topic, name, changed)
    pieces = messages.pieces(handles=True)
    if pieces is None:
        return None
    return Relabelled(name, answer, pieces[0], pieces[1], [])


def _pull_whole(answer: BrokerAnswer, head: bytes, split: int, name: str) -> Relabelled | None:
    """:func:`pull_bytes` of a group whose ids are the cluster-wide ones, holding messages:
    the tag goes in at every message boundary by one split and one join, and the client's
    answer is made whole — the pieces are views of it."""
    content, start = answer.content, len(head)
    if not content.startswith(FIRST, start) or content[split - 1] != _CLOSE:
        return None
    queues = _queues(content[split + len(QUEUES) : -2], "", name, {})  # no id to map: no topic
    if queues is None:
        return None
    parts = content.rsplit(BOUNDARY)
    last = parts[-1]  # the last message, its closing brace and the queues
    after = b"".join((QUEUES, *queues, b"]}"))
    parts[-1] = last[: len(last) - (len(content) - split + 1)] + _tag_closed(name) + after
    whole = _tag_between(name).join(parts)
    return _whole(answer, name, whole, len(parts), start, len(whole) - len(after), queues)


def _receive_whole(answer: BrokerAnswer, head: bytes, name: str) -> Relabelled | None:
    """:func:`receive_bytes` of a group whose ids are the cluster-wide ones, holding
    messages, when the answer holds one handle pattern per message (none is a property's
    name): the prefix goes in after every handle pattern and the tag at every message
    boundary, each by one split and one join, and the client's answer is made whole — the
    pieces are views of it. None when not so (the per-message way)."""
    content, start = answer.content, len(head)
    if not content.startswith(FIRST, start) or content[-3] != _CLOSE:
        return None
    handles = content.rsplit(HANDLE)
    parts = _prefixed_handle(name).join(handles).rsplit(BOUNDARY)
    if len(handles) - 1 != len(parts):
        return None
    parts[-1] = parts[-1][:-3] + _tag_closed(name) + b"]}"
    whole = _tag_between(name).join(parts)
    return _whole(answer, name, whole, len(parts), start, len(whole) - 2, [])


def _whole(
    answer: BrokerAnswer,
    name: str,
    whole: bytes,
    count: int,
    start: int,
    end: int,
    queues: list[Piece],
) -> Relabelled:
    """``whole`` as a Relabelled: its messages ``whole[start:end]``, and after them the
    queues (as many pieces as ``queues``), as views."""
    view = memoryview(whole)
    queued: list[Piece] = [view[end + len(QUEUES) : -2]] if queues else []
    return Relabelled(name, answer, [view[start:end]], count, queued, whole)


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
    return Relabelled(name, answer, _items(messages), len(messages), [])


def merged_pull(group: str, route: TopicRoute, answers: Sequence[Relabelled]) -> bytes:
    """One group pull answer from each broker group's (:func:`merge_group_pulls`' JSON)."""
    head = _head(group, route.topic)
    if len(answers) == 1 and (whole := _alone(answers[0], head)) is not None:
        return whole
    pieces: list[Piece] = [head]
    _joined(pieces, [a.messages for a in answers])
    pieces.append(QUEUES)
    _joined(pieces, [a.queues for a in answers])
    pieces.append(b"]}")
    return b"".join(pieces)


def merged_receive(group: str, topic: str, answers: Sequence[Relabelled]) -> bytes:
    """One POP receive answer from each broker group's."""
    head = _head(group, topic)
    if len(answers) == 1 and (whole := _alone(answers[0], head)) is not None:
        return whole
    pieces: list[Piece] = [head]
    _joined(pieces, [a.messages for a in answers])
    pieces.append(b"]}")
    return b"".join(pieces)


def _alone(answer: Relabelled, head: bytes) -> bytes | None:
    """The one answer as the client gets it, made when it was relabelled: what joining its
    pieces behind ``head`` gives (None: they are to be joined)."""
    whole = answer.whole
    return whole if whole is not None and whole.startswith(head) else None


def _joined(pieces: list[Piece], parts: list[list[Piece]]) -> None:
    first = True
    for part in parts:
        if part:
            if not first:
                pieces.append(b",")
            pieces.extend(part)
            first = False


@functools.lru_cache(maxsize=4096)
def _head(group: str, topic: str) -> bytes:
    return b'{"group":%s,"topic":%s,"messages":[' % (orjson.dumps(group), orjson.dumps(topic))


@functools.lru_cache(maxsize=256)
def _tag(name: str) -> bytes:
    """What each message and queue of broker group ``name`` gets before its closing brace."""
    return b',"broker_group":' + orjson.dumps(name)


@functools.lru_cache(maxsize=256)
def _tag_between(name: str) -> bytes:
    return _tag(name) + BOUNDARY


@functools.lru_cache(maxsize=256)
def _tag_between_queues(name: str) -> bytes:
    return _tag(name) + QUEUE_BOUNDARY


@functools.lru_cache(maxsize=256)
def _tag_closed(name: str) -> bytes:
    return _tag(name) + b"}"


@functools.lru_cache(maxsize=4096)
def _queue_id_marker(topic: str) -> bytes:
    """A message's own queue id follows the first of these in it (see the module's doc)."""
    return b'"topic":' + orjson.dumps(topic) + b',"queue_id":'


@functools.lru_cache(maxsize=256)
def _handle_prefix(name: str) -> bytes:
    """What goes in front of a broker's receipt handle, as JSON string content."""
    return orjson.dumps(prefix_handle(name, ""))[1:-1]


@functools.lru_cache(maxsize=256)
def _prefixed_handle(name: str) -> bytes:
    return HANDLE + _handle_prefix(name)


class _Messages:
    """The messages text ``content[start:end]`` of one broker group's answer, cut up."""

    def __init__(
        self,
        content: bytes,
        start: int,
        end: int,
        topic: str,
        name: str,
        changed: dict[int, int],
    ) -> None:
        self.content = content
        self.view = memoryview(content)
        self.start = start
        self.end = end
        self.name = name
        self.tag = _tag(name)
        self.changed = changed
        self.topic = topic

    def pieces(self, *, handles: bool) -> tuple[list[Piece], int] | None:
        """The relabelled messages in pieces and how many; None when not as expected."""
        content, start, end = self.content, self.start, self.end
        if start == end:
            return [], 0
        if not content.startswith(FIRST, start) or content[end - 1] != ord("}"):
            return None
        if not self.changed:  # a group whose ids are the cluster-wide ones (the usual case)
            joined = self._joined(handles)
            if joined is not None:
                return joined
        elif content.rfind(RETRY_MEMBER, start, end) >= 0:
            return None  # a retry message keeps its broker's queue id: decoded
        cuts = [end - 1]  # each message's closing brace, found from the last one back
        at = end
        while (at := content.rfind(BOUNDARY, start, at)) >= 0:
            cuts.append(at)
        cuts.reverse()
        view, tag = self.view, self.tag
        if not self.changed and not handles:  # a pull from a group whose ids are the same
            pieces = [
                p for a, b in zip([start, *cuts], cuts, strict=False) for p in (view[a:b], tag)
            ]
        else:
            edited = self._edited(start, cuts, handles)
            if edited is None:
                return None
            pieces = edited
        pieces.append(view[cuts[-1] : end])
        return pieces, len(cuts)

    def _joined(self, handles: bool) -> tuple[list[Piece], int] | None:
        """:meth:`pieces` of a group whose ids need no change, by splits and joins (each one
        C loop over the whole answer) instead of a few Python steps per message: the tag
        goes in at every message boundary, and — when the answer holds one handle pattern
        per message, so none is a property's name — the prefix after every handle pattern.
        None when there are more handle patterns than messages (the per-message way)."""
        content = self.content
        text = content
        if handles:
            split = content.rsplit(HANDLE)
            text = _prefixed_handle(self.name).join(split)
        parts: list[Piece] = list(text.rsplit(BOUNDARY))
        count = len(parts)
        if handles and len(split) - 1 != count:
            return None
        # the first part is the answer's head and its first message, the last one its last
        # message and the answer's end: they are cut to the messages
        parts[0] = memoryview(parts[0])[self.start :]
        tail = len(content) - self.end + 1  # the last message's closing brace and what follows
        parts[-1] = memoryview(parts[-1])[: len(parts[-1]) - tail]
        pieces: list[Piece] = [_tag_between(self.name)] * (2 * count)  # one copy: the answer's
        pieces[::2] = parts
        pieces[-1] = _tag_closed(self.name)
        return pieces, count

    def _edited(self, start: int, cuts: list[int], handles: bool) -> list[Piece] | None:
        """Each message up to its closing brace with its queue id made cluster-wide, its
        handle prefixed (``handles``) and its tag; None unless each is of the topic."""
        content, view, changed = self.content, self.view, self.changed
        marker = _queue_id_marker(self.topic)
        prefix = _handle_prefix(self.name)
        pieces: list[Piece] = []
        resume = start
        for cut in cuts:
            if changed:
                found = content.find(marker, resume, cut)
                if found < 0:
                    return None  # another topic's message
                number = found + len(marker)
                comma = content.find(b",", number, cut)
                digits = content[number:comma] if comma > number else b""
                if not digits.isdigit():
                    return None
                cluster = changed.get(int(digits))
                if cluster is not None:
                    pieces += (view[resume:number], b"%d" % cluster)
                    resume = comma
            if handles:
                handle = content.rfind(HANDLE, resume, cut)
                if handle < 0:
                    return None
                handle += len(HANDLE)
                pieces += (view[resume:handle], prefix)
                resume = handle
            pieces += (view[resume:cut], self.tag)
            resume = cut
        return pieces


def _queues(text: bytes, topic: str, name: str, changed: dict[int, int]) -> list[Piece] | None:
    """A pull's queues (a few hundred bytes) with ``broker_group`` and cluster-wide ids: items
    of another topic (a retry topic's) keep theirs."""
    if not text:
        return []
    parts = text.rsplit(QUEUE_BOUNDARY)
    if text[-1:] != b"}" or text.count(b'"queue_id":') != len(parts):
        return None
    parts[-1] = parts[-1][:-1] + _tag_closed(name)
    tagged = _tag_between_queues(name).join(parts)
    if not changed:
        return [tagged]
    marker = b'{"topic":' + orjson.dumps(topic) + b',"queue_id":'
    parts = tagged.split(marker)
    for index in range(1, len(parts)):
        part = parts[index]
        comma = part.find(b",")
        if comma < 1 or not part[:comma].isdigit():
            return None
        cluster = changed.get(int(part[:comma]))
        if cluster is not None:
            parts[index] = b"%d%s" % (cluster, part[comma:])
    return [marker.join(parts)]


def _items(items: list[dict[str, Any]]) -> list[Piece]:
    return [orjson.dumps(items)[1:-1]] if items else []
