"""The one client of spoolmq's HTTP API for the Spark jobs, and the rules by which it retries.

The source and sink (:mod:`spark_jobs.streaming`) and the replay
(:mod:`spark_jobs.replay.http_sender`) all send through :class:`SpoolmqClient`. It speaks to
a broker or a proxy (the same routes), tries the endpoints it was given in turn, and:

- **retries** what a retry can change: no answer (a transport error) and the statuses of
  :data:`RETRYABLE_STATUS`; any other answer that is not a 2xx fails at once, mapped onto
  :mod:`spark_jobs.errors` (a 4xx will not change on a retry);
- **rotates** to the next endpoint after no answer and after :data:`ROTATING_STATUS`, and
  stays on the endpoint that answered for the requests that follow;
- **waits** before each retry as :meth:`RetryPolicy.delay_s` says: a ``Retry-After`` the
  answer carries (seconds or an HTTP date) up to :attr:`RetryPolicy.max_retry_after_s`,
  else a backoff doubling from :attr:`RetryPolicy.backoff_ms` up to
  :attr:`RetryPolicy.max_backoff_ms`;
- **keys** a send: every attempt of :meth:`SpoolmqClient.send` carries the same
  ``Idempotency-Key`` and the same body, so the broker stores it once whatever failed in
  between (inside its dedup window), and a send that never got an answer fails with
  :class:`~spark_jobs.errors.OutcomeUnknownError` (retry it with the same key), not with a
  claim that nothing was stored.

The endpoints are one place to write to: the replicas of one broker group, or proxies of
one cluster. A keyed retry may go to another of them; the slave promoted after a failover
holds the master's keys, and every proxy sends a keyed send to the queue its key hashes to.

Every instance lives in one process (the driver, one task on an executor, or the replay's
driver); none is shared across threads.
"""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
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

RETRYABLE_STATUS: Final = frozenset({408, 421, 425, 429, 500, 502, 503, 504})
"""The answers a retry can change. 408 and 425: the server did not take the request in;
421 NOT_MASTER: a slave, which never takes a write (its master, or the slave promoted in
its place, does); 429: over a rate or a cap, with ``Retry-After``; 500, 502, 503 (no master,
a disk-full or catching-up broker, a proxy without a route) and 504 (a proxy's
OUTCOME_UNKNOWN). Every other 4xx is the request's fault and fails at once."""
ROTATING_STATUS: Final = frozenset({421, 502, 503})
"""Answers after which the next endpoint may do better than this one: a slave (421), a
gateway without its upstream (502), a broker or proxy that cannot serve now (503). 429 and
504 stay: a rate is per token and endpoint, and a proxy's 504 is best asked again where the
send went."""
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
REPLAYED_HEADER: Final = "Idempotent-Replayed"
MAX_PULL_MESSAGES: Final = 1024
RECORDS_MEDIA_TYPE: Final = "application/vnd.spoolmq.commitlog-records"
"""A range read's answer: CommitLog records in RocketMQ's layout, one after another."""
DEFAULT_FETCH_BYTES: Final = 4 * 1024 * 1024
"""A range read's byte budget unless the source names one (the broker's default too)."""
MAX_FETCH_BYTES: Final = 16 * 1024 * 1024
"""The largest byte budget a broker takes."""


def retry_after_s(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """The seconds a ``Retry-After`` header asks for: delay-seconds, or an HTTP date (at
    least 0 when it has passed); None when there is none or it cannot be read."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000": an HTTP date is in GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now())


@functools.lru_cache(maxsize=8)
def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """The context https endpoints' certificates are checked with: against ``ca_file``, or
    httpx's default CAs. Made once per process: every Spark task opens a client, and loading
    the CAs cost a task more than a small range read."""
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    return httpx.create_ssl_context()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard a request is retried before the job fails clearly."""

    retries: int = 10
    """Attempts after the first (no answer, RETRYABLE_STATUS)."""
    backoff_ms: int = 200
    """First wait; it doubles up to ``max_backoff_ms``."""
    max_backoff_ms: int = 5000
    timeout_s: float = 30.0
    """Per request (connect, read, write)."""
    max_retry_after_s: float = 60.0
    """The longest ``Retry-After`` waited for; a longer one is cut to this."""

    def delay_s(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based): what ``Retry-After``
        asks (the server knows when it will take the request again), else the backoff."""
        asked = retry_after_s(retry_after)
        if asked is not None:
            return min(asked, self.max_retry_after_s)
        return self.backoff_s(attempt)

    def backoff_s(self, attempt: int) -> float:
        """``backoff_ms`` doubled ``attempt`` times, at most ``max_backoff_ms``."""
        return min(self.backoff_ms << min(attempt, 20), self.max_backoff_ms) / 1000


@dataclass(frozen=True, slots=True)
class Connection:
    """Where spoolmq answers (brokers or proxies, tried in turn) and with which token;
    ``ca_file``: the PEM CA https endpoints' certificates are checked against (the system's
    CAs without one)."""

    endpoints: tuple[str, ...]
    token: str | None = field(default=None, repr=False)
    retry: RetryPolicy = RetryPolicy()
    ca_file: str | None = None


@dataclass(frozen=True, slots=True)
class QueueState:
    """One queue as a broker (or the proxy) reports it."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int
    broker_group: str | None = None


@dataclass(frozen=True, slots=True)
class RecordRange:
    """A range read's answer: the status (a pull's), where the next read starts, the
    queue's min and max offsets, and ``count`` records as the broker stores them."""

    status: str
    next_offset: int
    min_offset: int
    max_offset: int
    count: int
    records: bytes


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
        if not connection.endpoints:
            raise ValueError("a connection needs at least one endpoint")
        headers = {"Authorization": f"Bearer {connection.token}"} if connection.token else {}
        self.endpoints = connection.endpoints
        self.retry = connection.retry
        self.retried = 0
        """Retries made so far, by every request of this client."""
        self._current = 0
        self._sleep = sleep
        self._http = httpx.Client(
            timeout=connection.retry.timeout_s,
            headers=headers,
            transport=transport,
            verify=tls_context(connection.ca_file),
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
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tags: str | None,
        sql: str | None = None,
    ) -> dict[str, Any]:
        """One pull from ``offset`` (bodies as base64), without long-polling; ``sql``: a
        SQL92 filter the broker applies."""
        params: dict[str, Any] = {
            "offset": offset,
            "max_messages": max(1, min(max_messages, MAX_PULL_MESSAGES)),
            "body_encoding": "base64",
        }
        if tags:
            params["tags"] = tags
        if sql is not None:
            params["filter"] = sql
        return self.call(
            "GET",
            f"/v1/topics/{_path(topic)}/queues/{queue_id}/messages",
            params=params,
            what=f"pulling {topic}/{queue_id} at offset {offset}",
        )

    def records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        end_offset: int,
        max_bytes: int = DEFAULT_FETCH_BYTES,
        tags: str | None = None,
        sql: str | None = None,
        wait_ms: int = 0,
    ) -> RecordRange:
        """One range read of ``[offset, end_offset)`` up to ``max_bytes`` of records as
        stored (decoded by :mod:`spark_jobs.records`); ``tags`` and the SQL92 filter ``sql``
        are the broker's to apply. ``wait_ms``: the broker's long poll where nothing is
        there yet (a replica behind)."""
        params: dict[str, Any] = {
            "offset": offset,
            "end_offset": end_offset,
            "max_bytes": max(1, min(max_bytes, MAX_FETCH_BYTES)),
        }
        if tags:
            params["tags"] = tags
        if sql is not None:
            params["filter"] = sql
        if wait_ms > 0:
            params["wait_ms"] = wait_ms
        response = self.request(
            "GET",
            f"/v1/topics/{_path(topic)}/queues/{queue_id}/records",
            params=params,
            what=f"reading the records of {topic}/{queue_id} at offset {offset}",
        )
        return _record_range(response)

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
            idempotency_key=key,
            what=f"sending {len(batch.get('messages', ()))} messages to {topic} under key {key}",
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
        idempotency_key: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """A 2xx answer, after the retries the module's rules allow; ``idempotency_key`` goes
        with every attempt, and marks a request whose outcome is unknown when none answers."""
        if idempotency_key is not None:
            kwargs["headers"] = {**kwargs.get("headers", {}), IDEMPOTENCY_HEADER: idempotency_key}
        started = time.monotonic()
        failure = _Failure("nothing", None, rotate=False)
        for attempt in range(self.retry.retries + 1):
            answered = self._attempt(method, path, what, kwargs)
            if isinstance(answered, httpx.Response):
                return answered
            failure = answered
            if failure.rotate:
                self._rotate()
            if attempt < self.retry.retries:
                self.retried += 1
                self._sleep(self.retry.delay_s(attempt, failure.retry_after))
        tried = f"{self.retry.retries + 1} attempts over {time.monotonic() - started:.1f} s"
        raise self._gave_up(what, tried, failure.text, keyed=idempotency_key is not None)

    def _attempt(
        self, method: str, path: str, what: str, kwargs: dict[str, Any]
    ) -> httpx.Response | _Failure:
        """One request to the current endpoint: its 2xx answer, or why a retry may do
        better; raises the refusal of any other answer."""
        endpoint = self.endpoints[self._current]
        try:
            response = self._http.request(method, endpoint + path, **kwargs)
        except httpx.TransportError as exc:
            return _Failure(f"{endpoint}: {type(exc).__name__} {exc}".rstrip(), None, rotate=True)
        status = response.status_code
        if response.is_success:
            return response
        if status not in RETRYABLE_STATUS:
            raise refusal(response, what)
        return _Failure(
            f"{endpoint}: HTTP {status} {problem_text(response)}",
            response.headers.get("retry-after"),
            rotate=status in ROTATING_STATUS,
        )

    def _gave_up(self, what: str, tried: str, last: str, *, keyed: bool) -> BrokerUnavailableError:
        if keyed:
            return OutcomeUnknownError(
                f"{what}: no answer after {tried} (last: {last}); the messages may or may not "
                "be stored. Sent again under the same Idempotency-Key inside the broker's "
                "dedup window, they are stored once: a Spark task retried or a query "
                "restarted sends the same keys (a new replay run makes new ones)."
            )
        return BrokerUnavailableError(
            f"{what}: no answer after {tried} from {', '.join(self.endpoints)} (last: {last}). "
            "Is spoolmq running there? More patience: option spoolmq.retries (replay: "
            "--retries)."
        )

    def _rotate(self) -> None:
        self._current = (self._current + 1) % len(self.endpoints)


@dataclass(frozen=True, slots=True)
class _Failure:
    """An attempt that a retry may change: what happened, the answer's ``Retry-After``, and
    whether the next endpoint should be tried."""

    text: str
    retry_after: str | None
    rotate: bool


def refusal(response: httpx.Response, what: str) -> BrokerRefusedError:
    """The error for an answer that a retry will not change (a 4xx, or a status outside
    RETRYABLE_STATUS)."""
    status = response.status_code
    code = problem_code(response)
    detail = problem_text(response)
    where = str(response.request.url.copy_with(query=None))
    if status == 401:
        return AuthenticationError(
            f"{what}: {where} refused the token (401 {detail}); give a valid one in the "
            "SPOOLMQ_TOKEN environment variable of the driver (or a source's or sink's "
            "option spoolmq.token)",
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


def _record_range(response: httpx.Response) -> RecordRange:
    """A range read's answer from its headers and body; BrokerRefusedError when it is not
    one (an endpoint that is no spoolmq broker or proxy, or an older one)."""
    headers = response.headers
    media_type = headers.get("content-type", "").split(";")[0].strip()
    try:
        if media_type != RECORDS_MEDIA_TYPE:
            raise ValueError(f"Content-Type {media_type or 'none'}")
        return RecordRange(
            headers["spoolmq-status"],
            int(headers["spoolmq-next-offset"]),
            int(headers["spoolmq-min-offset"]),
            int(headers["spoolmq-max-offset"]),
            int(headers["spoolmq-record-count"]),
            response.content,
        )
    except (KeyError, ValueError) as exc:
        raise BrokerRefusedError(
            f"{response.request.url} answered {response.status_code} without a range of "
            f"records ({exc})",
            response.status_code,
        ) from None


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
