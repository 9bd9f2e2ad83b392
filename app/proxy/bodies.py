"""What the proxy reads of the bodies it forwards, and how it rewrites them: no more than
routing needs.

A send names its cluster-wide queue (or sharding key) inside its JSON, and the broker must get
the group's local queue id instead; answers carry local queue ids that the client must see as
cluster-wide ones. Decoding a 100-message batch or a 32-message pull and encoding it again for
that cost more than the rest of the proxy's work on it, so:

* a send whose bytes hold neither ``_`` nor ``\\`` cannot name ``queue_id`` or
  ``sharding_key`` (not even with escapes): its body is forwarded as it came, with the local
  ``queue_id`` put in front (two ``memchr`` scans instead of a parse); any other body is
  decoded, checked and encoded again;
* an answer about one queue (a send's receipts, a pull of one queue) gets its ``queue_id``
  members relabelled in place (:func:`relabel_queue_id`) and members added at its front
  (:func:`with_members`), without being decoded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from app.errors import ApiError
from services.cluster import batch_queue_id, batch_sharding_key, localize_send


def json_body(raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        raise ApiError("MALFORMED_JSON", "the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError("VALIDATION_FAILED", "the request body is a JSON object")
    return data


class JsonSend:
    """A JSON send (one message or a batch): where it asks to go, and its body for a group."""

    __slots__ = ("decoded", "queue_id", "raw", "sharding_key")

    def __init__(self, raw: bytes) -> None:
        self.raw = raw.lstrip()
        self.decoded: dict[str, Any] | None = None
        self.queue_id: int | None = None
        self.sharding_key: str | None = None
        # find, not `in`: `bytes in bytes` tries its operand as an int first (a TypeError)
        if self.raw[:1] == b"{" and raw.find(b"_") < 0 and raw.find(b"\\") < 0:
            return  # names no queue and no sharding key: forwarded undecoded
        self.decoded = json_body(raw)
        self.queue_id = batch_queue_id(self.decoded)
        self.sharding_key = batch_sharding_key(self.decoded)

    def for_queue(self, local_queue_id: int) -> bytes:
        """The body to send to the group that hosts the chosen queue."""
        return b"".join(self.parts_for(local_queue_id))

    def parts_for(self, local_queue_id: int) -> tuple[bytes | memoryview, ...]:
        """:meth:`for_queue` as buffers to write one after the other: an undecoded body is
        not copied (a 100 KB batch was copied twice, by a slice and by a format)."""
        if self.decoded is not None:
            try:
                return (orjson.dumps(localize_send(self.decoded, local_queue_id)),)
            except orjson.JSONEncodeError as exc:  # orjson writes fewer levels than it reads
                raise ApiError(
                    "VALIDATION_FAILED", f"the request body cannot be passed on: {exc}"
                ) from None
        first = _FIRST_MEMBER.match(self.raw, 1)
        comma = b"" if first is not None and first.group(1) == b"}" else b","
        return (b'{"queue_id":%d%s' % (local_queue_id, comma), memoryview(self.raw)[1:])


_FIRST_MEMBER = re.compile(rb"\s*(.)", re.DOTALL)
"""What follows an object's ``{``: its first member's quote, or ``}``."""

_QUEUE_ID_MEMBER: dict[int, re.Pattern[bytes]] = {}


def relabel_queue_id(content: bytes, local: int, cluster: int) -> bytes:
    """Every ``"queue_id":<local>`` member of a JSON text becomes ``"queue_id":<cluster>``.

    Safe on a broker's answer about one queue without parsing it: everything a client put in a
    message (body, tags, keys, property names and values) is a JSON string, in which a quote is
    always escaped, so an unescaped ``"queue_id":`` followed by a number is a member name of the
    answer itself — the queue's and its messages' (all of that queue).
    """
    if local == cluster:
        return content
    pattern = _QUEUE_ID_MEMBER.get(local)
    if pattern is None:
        member = rb'"queue_id"\s*:\s*%d(?=\s*[,}])' % local
        pattern = _QUEUE_ID_MEMBER[local] = re.compile(member)
    return pattern.sub(b'"queue_id":%d' % cluster, content)


def with_members(content: bytes, members: Mapping[str, Any]) -> bytes:
    """A JSON object's text with ``members`` put in front of its own (it has none of them)."""
    if not members:
        return content
    return _in_front(content, memoryview(orjson.dumps(members))[:-1])


def with_group(content: bytes, group: str) -> bytes:
    """:func:`with_members` of ``{"broker_group": group}``, its text made once per group (a
    send's receipts get it on every answer)."""
    added = _GROUP_MEMBERS.get(group)
    if added is None:
        if len(_GROUP_MEMBERS) >= 4096:
            _GROUP_MEMBERS.clear()
        added = _GROUP_MEMBERS[group] = orjson.dumps({"broker_group": group})[:-1]
    return _in_front(content, added)


_GROUP_MEMBERS: dict[str, bytes] = {}
"""``{"broker_group":"<group>"`` by group: the members' text up to the object's rest."""


def _in_front(content: bytes, added: bytes | memoryview) -> bytes:
    """``added`` (an object's ``{`` and members) in front of the members of ``content``."""
    rest = _BLANKS.match(content).end() + 1  # type: ignore[union-attr]  # past the `{`
    first = _FIRST_MEMBER.match(content, rest)
    comma = b"" if first is not None and first.group(1) == b"}" else b","
    # One copy: the members' `{...` and the object's rest joined through views, no slices.
    return b"".join((added, comma, memoryview(content)[rest:]))


_BLANKS = re.compile(rb"\s*")
"""What ``bytes.lstrip()`` strips (an ASCII blank); it always matches."""
