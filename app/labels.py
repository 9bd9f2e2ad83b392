"""The cluster's labels on the broker's answers, where a proxy asks for them (the request's
``Spoolmq-Broker-Group`` and ``Spoolmq-Queue-Ids`` headers; see
:mod:`services.cluster.labels` for what they mean): which members of each answer they change.
An answer nobody asked to label is left as it is."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from app.errors import ApiError
from services.cluster import ClusterLabels

MESSAGE_COUNT_HEADER = "spoolmq-message-count"
"""How many messages a labelled group pull or POP receive holds."""


def requested(request: Request, topic: str) -> ClusterLabels | None:
    """The labels ``request`` asks for on its answer about ``topic``, if any."""
    try:
        return ClusterLabels.from_headers(request.scope["headers"], topic)
    except ValueError:
        raise ApiError(
            "INVALID_REQUEST", "Spoolmq-Queue-Ids is local=cluster pairs of queue ids"
        ) from None


def on_send(out: dict[str, Any], labels: ClusterLabels) -> dict[str, Any]:
    """A send's receipts: cluster-wide queue ids, and the group that stored them."""
    labels.apply(out["messages"], tag=False)
    return {"broker_group": labels.group, **out}


def on_pull(out: dict[str, Any], labels: ClusterLabels) -> None:
    """A pull of one queue: the queue's cluster-wide id, on it and on its messages."""
    out["queue_id"] = labels.queue_id(out["queue_id"])
    labels.apply(out["messages"], tag=False)


def on_group_pull(out: dict[str, Any], labels: ClusterLabels) -> dict[str, str]:
    """A group pull: cluster-wide ids and the group on every message and queue position; the
    answer's headers say how many messages it holds (the proxy shares budgets by them)."""
    labels.apply(out["messages"], tag=True)
    labels.apply(out["queues"], tag=True)
    return counted(out)


def on_receive(out: dict[str, Any], labels: ClusterLabels) -> dict[str, str]:
    """A POP receive: cluster-wide ids, the group, and handles that name the group; the
    answer's headers say how many messages it holds."""
    messages = out["messages"]
    labels.apply(messages, tag=True)
    for message in messages:
        message["receipt_handle"] = labels.handle(message["receipt_handle"])
    return counted(out)


def counted(out: dict[str, Any]) -> dict[str, str]:
    return {MESSAGE_COUNT_HEADER: str(len(out["messages"]))}
