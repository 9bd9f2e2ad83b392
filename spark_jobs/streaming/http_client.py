"""A small synchronous client of spoolmq's HTTP API for the Spark source and sink.

It speaks to a broker or a proxy (the same routes), tries the endpoints it was given in
turn, and retries what a retry can change -- no answer, ``429``, ``5xx``, ``421`` (a slave)
-- with a doubling backoff; then it fails with what it tried and what it last saw. A ``4xx``
fails at once, mapped onto :mod:`spark_jobs.errors`. Every instance lives in one
process (the driver, or one task on an executor); none is shared across threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import httpx
import orjson

from spark_jobs.errors import (
    AuthenticationError,
    BrokerRefusedError,
    BrokerUnavailableError,
    IdempotencyKeyReusedError,
    OutcomeUnknownError,
    PermissionDeniedError,
    UnknownTopicError,
)
from spark_jobs.problems import problem_code, problem_text
from spark_jobs.streaming.options import Connection

RETRYABLE_STATUS: Final = frozenset({408, 421, 425, 429, 500, 502, 503, 504})
"""421: a slave (writes go to its master); 503/504 include a proxy's unknown outcome."""
_ROTATE_STATUS: Final = frozenset({421, 502, 503})
"""Answers after which another endpoint may do better."""
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
REPLAYED_HEADER: Final = "Idempotent-Replayed"
MAX_PULL_MESSAGES: Final = 1024


@dataclass(frozen=True, slots=True)
class QueueState:
    """One queue as a broker (or the proxy) reports it."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    broker_group: str | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """The receipts of one keyed send, and whether the broker answered them from an earlier
    attempt (``Idempotent-Replayed: true``) instead of storing anything."""

    receipts: list[dict[str, Any]]
    replayed: bool


class SpoolmqClient:
    """Requests to spoolmq with retries; ``with SpoolmqClient(connection) as client: ...``."""

    def __init__(
        self,
        connection: Connection,
        *,
        sleep: Callable[[float], None] = time.sleep,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {connection.token}"} if connection.token else {}
        self.endpoints = connection.endpoints
        self.retry = connection.retry
        self._current = 0
        self._sleep = sleep
        self._http = httpx.Client(
            timeout=connection.retry.timeout_s, headers=headers, transport=transport
        )

    def __enter__(self) -> SpoolmqClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ reads

    def queues(self, topic: str) -> list[QueueState]:
        """Every readable queue of ``topic`` with its min and max offsets."""
        detail = self.call("GET", f"/v1/topics/{_path(topic)}", what=f"reading topic {topic}")
        return [
            QueueState(
                topic,
                int(q["queue_id"]),
                int(q["min_offset"]),
                int(q["max_offset"]),
                q.get("broker_group"),
            )
            for q in detail.get("queues", ())
        ]

    def topic_names(self) -> list[str]:
        """The topics clients send to (no system, retry or dead-letter topics)."""
        names: list[str] = []
        after: str | None = None
        while True:  # page by page: a broker lists at most 1000 topics an answer
            params: dict[str, object] = {"limit": 1000}
            if after is not None:
                params["after"] = after
            listed = self.call("GET", "/v1/topics", params=params, what="listing topics")
            names += [
                t["topic"]
                for t in listed.get("topics", ())
                if not t.get("system") and not str(t["topic"]).startswith("%")
            ]
            after = listed.get("next_after")
            if after is None:
                return sorted(names)

    def offset_for_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset of the queue stored at or after ``timestamp_ms`` (its max offset
        when there is none)."""
        found = self.call(
            "GET",
            f"/v1/topics/{_path(topic)}/queues/{queue_id}/offset",
            params={"timestamp": timestamp_ms, "boundary": "lower"},
            what=f"finding the offset of {topic}/{queue_id} at {timestamp_ms}",
        )
        return int(found["offset"])

    def pull(
        self, topic: str, queue_id: int, offset: int, max_messages: int, tags: str | None
    ) -> dict[str, Any]:
        """One pull from ``offset`` (bodies as base64), without long-polling."""
        params: dict[str, Any] = {
            "offset": offset,
            "max_messages": max(1, min(max_messages, MAX_PULL_MESSAGES)),
            "body_encoding": "base64",
        }
        if tags:
            params["tags"] = tags
        return self.call(
            "GET",
            f"/v1/topics/{_path(topic)}/queues/{queue_id}/messages",
            params=params,
            what=f"pulling {topic}/{queue_id} at offset {offset}",
        )

    # ------------------------------------------------------------------ writes

    def commit_offsets(self, group: str, offsets: Sequence[tuple[str, int, int]]) -> None:
        """Store ``group``'s next offsets (topic, queue, offset), at most 1000 per request."""
        items = [{"topic": t, "queue_id": q, "offset": o} for t, q, o in offsets]
        for start in range(0, len(items), 1000):
            self.call(
                "POST",
                f"/v1/groups/{_path(group)}/offsets",
                json={"offsets": items[start : start + 1000]},
                what=f"committing the offsets of group {group}",
            )

    def send(self, topic: str, batch: Mapping[str, Any], key: str) -> Sent:
        """POST one atomic batch under ``key``; every retry repeats it with the same key, so
        it is stored once whatever fails in between (inside the broker's dedup window)."""
        response = self.request(
            "POST",
            f"/v1/topics/{_path(topic)}/messages",
            json=batch,
            headers={IDEMPOTENCY_HEADER: key},
            what=f"sending {len(batch.get('messages', ()))} messages to {topic} under key {key}",
            keyed=True,
        )
        receipts = _json(response).get("messages", [])
        replayed = response.headers.get(REPLAYED_HEADER, "").lower() == "true"
        return Sent(list(receipts), replayed)

    # ------------------------------------------------------------------ the loop

    def call(self, method: str, path: str, *, what: str, **kwargs: Any) -> dict[str, Any]:
        """A request's JSON answer (an object), after retries."""
        return _json(self.request(method, path, what=what, **kwargs))

    def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        keyed: bool = False,
        **kwargs: Any,
    ) -> httpx.Response:
        """A 2xx answer; retried on no answer and on RETRYABLE_STATUS, rotating endpoints."""
        started = time.monotonic()
        last = "nothing"
        for attempt in range(self.retry.retries + 1):
            endpoint = self.endpoints[self._current]
            retry_after = None
            try:
                response = self._http.request(method, endpoint + path, **kwargs)
            except httpx.TransportError as exc:
                last = f"{endpoint}: {type(exc).__name__} {exc}".rstrip()
                self._rotate()
            else:
                if response.is_success:
                    return response
                if response.status_code not in RETRYABLE_STATUS:
                    raise refusal(response, what)
                last = f"{endpoint}: HTTP {response.status_code} {problem_text(response)}"
                retry_after = response.headers.get("retry-after")
                if response.status_code in _ROTATE_STATUS:
                    self._rotate()
            if attempt < self.retry.retries:
                self._sleep(self.retry.delay_s(attempt, retry_after))
        tried = f"{self.retry.retries + 1} attempts over {time.monotonic() - started:.1f} s"
        if keyed:
            raise OutcomeUnknownError(
                f"{what}: no answer after {tried} (last: {last}); the messages may or may not "
                "be stored. A retry under the same Idempotency-Key inside the broker's dedup "
                "window stores them once: Spark retries the task, or restart the query."
            )
        raise BrokerUnavailableError(
            f"{what}: no answer after {tried} from {', '.join(self.endpoints)} (last: {last}). "
            "Is spoolmq running there? More patience: spoolmq.retries, spoolmq.retryBackoffMs."
        )

    def _rotate(self) -> None:
        self._current = (self._current + 1) % len(self.endpoints)


def refusal(response: httpx.Response, what: str) -> BrokerRefusedError:
    """The error for a 4xx that a retry will not change."""
    status = response.status_code
    code = problem_code(response)
    detail = problem_text(response)
    where = str(response.request.url.copy_with(query=None))
    if status == 401:
        return AuthenticationError(
            f"{what}: {where} refused the token (401 {detail}); give a valid one in option "
            "spoolmq.token or the SPOOLMQ_TOKEN environment variable of the driver",
            status,
            code,
        )
    if status == 403:
        return PermissionDeniedError(
            f"{what}: the token may not do this (403 {detail})", status, code
        )
    if code == "TOPIC_NOT_FOUND":
        return UnknownTopicError(f"{what}: no such topic ({detail})", status, code)
    if code == "IDEMPOTENCY_KEY_REUSED":
        return IdempotencyKeyReusedError(
            f"{what}: the broker holds other rows under this key ({detail}). The rows of this "
            "batch and partition differ from an earlier attempt's: the query or its input "
            "changed between runs, or its rows come in a different order each time "
            "(use rowOrder=sorted)",
            status,
            code,
        )
    return BrokerRefusedError(f"{what}: HTTP {status} {detail}", status, code)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        raise BrokerRefusedError(
            f"{response.request.url} answered {response.status_code} without JSON",
            response.status_code,
        ) from None
    if not isinstance(body, dict):
        raise BrokerRefusedError(
            f"{response.request.url} answered a JSON {type(body).__name__}, not an object",
            response.status_code,
        )
    return body


def _path(name: str) -> str:
    return quote(name, safe="")
