"""One answer from several broker groups' answers to a group pull or a POP receive.

Each broker labels its own answer for the cluster (:mod:`services.cluster.labels`), so the
answer of the one group that delivered — the usual case — passes on as it came; the answers
of several are read and their messages (and a pull's queue positions) put in one list, each
group's in the order it gave them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from app.proxy.fanout import GroupAnswer


def merged_pull(group: str, topic: str, answers: Sequence[GroupAnswer]) -> bytes:
    """One group pull answer: every answering group's messages and queue positions."""
    if len(answers) == 1:
        return answers[0].answer.content
    messages: list[Any] = []
    queues: list[Any] = []
    for answer in answers:
        data = answer.answer.json()
        messages += data.get("messages") or ()
        queues += data.get("queues") or ()
    return orjson.dumps({"group": group, "topic": topic, "messages": messages, "queues": queues})


def merged_receive(group: str, topic: str, answers: Sequence[GroupAnswer]) -> bytes:
    """One POP receive answer: the messages of every group that handed out any."""
    chosen = [answer for answer in answers if answer.count]
    if len(chosen) == 1:
        return chosen[0].answer.content
    messages: list[Any] = []
    for answer in chosen:
        messages += answer.answer.json().get("messages") or ()
    return orjson.dumps({"group": group, "topic": topic, "messages": messages})
