"""Re-sending messages through spoolmq's HTTP API, in batches, under a rate limit (no pyspark).

``POST /v1/topics/{topic}/messages`` with ``{"messages": [{"body": "<base64>",
"body_encoding": "base64", "tags": "T", "keys": ["k1"], "properties": {"REPLAY_OF": "<id>"}}]}``
answers 201 with one entry per message. Each replayed message carries ``REPLAY_OF=<msg_id>``
of the original, so consumers can tell replays apart. Each batch carries an
``Idempotency-Key`` made of this run's random id and the batch's number: a batch whose answer
was lost is sent again with the same key, and the server answers the first receipts instead of
storing it twice. (A second run of the same replay has other keys: it replays again.)
"""

from __future__ import annotations

import base64
import json
import secrets
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, TextIO
from urllib.parse import quote

import httpx

from spark_jobs.formatting import format_duration
from storage.record.properties import (
    PROPERTY_IDEMPOTENCY_BATCH,
    PROPERTY_IDEMPOTENCY_FINGERPRINT,
    PROPERTY_IDEMPOTENCY_KEY,
)

REPLAY_OF: Final = "REPLAY_OF"
RETRYABLE_STATUS: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
SYSTEM_PROPERTIES: Final = frozenset(
    {
        "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG",
        "PGROUP", "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG",
        "CORRECTION_FLAG", "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY",
        "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
        "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID",
        "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER",
        "MSG_TYPE", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET", "__SHARDINGKEY",
        "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID", REPLAY_OF,
        PROPERTY_IDEMPOTENCY_KEY, PROPERTY_IDEMPOTENCY_FINGERPRINT, PROPERTY_IDEMPOTENCY_BATCH,
    }
)  # fmt: skip
"""RocketMQ's system property names: set by brokers and clients, never copied to a replay."""
_SEPARATORS: Final = ("\x01", "\x02")
_JSON_OVERHEAD: Final = 96  # field names and punctuation of one message in the request


class ReplayError(RuntimeError):
    """The server refused a batch, or kept failing after every retry."""


@dataclass(frozen=True, slots=True)
class ReplayMessage:
    """A message to re-send, as read from the store."""

    msg_id: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)


def replayable_properties(
    properties: Mapping[str, str], copy_properties: bool = True
) -> tuple[dict[str, str], int]:
    """The user properties a replay can send, and how many it must leave out.

    System properties are never copied. Names or values holding RocketMQ's separators
    (``\x01``, ``\x02``), which a RocketMQ producer could store but the HTTP API refuses,
    are left out and counted.
    """
    if not copy_properties:
        return {}, 0
    kept: dict[str, str] = {}
    dropped = 0
    for name, value in properties.items():
        if name in SYSTEM_PROPERTIES:
            continue
        if not name or not value or any(c in name or c in value for c in _SEPARATORS):
            dropped += 1
            continue
        kept[name] = value
    return kept, dropped


def message_payload(message: ReplayMessage, copy_properties: bool = True) -> dict[str, object]:
    """The JSON object of one message in a send request."""
    properties, _ = replayable_properties(message.properties, copy_properties)
    properties[REPLAY_OF] = message.msg_id
    payload: dict[str, object] = {
        "body": base64.b64encode(message.body).decode("ascii"),
        "body_encoding": "base64",
        "properties": properties,
    }
    if message.tags:
        payload["tags"] = message.tags
    if message.keys:
        payload["keys"] = list(message.keys)
    return payload


def payload_size(payload: Mapping[str, object]) -> int:
    """About how many bytes a message adds to a request."""
    body = payload["body"]
    extra = {k: v for k, v in payload.items() if k != "body"}
    return len(str(body)) + len(json.dumps(extra)) + _JSON_OVERHEAD


class TokenBucket:
    """At most ``rate`` tokens per second, in bursts of at most ``capacity``.

    ``acquire(n)`` takes n tokens, sleeping as long as the bucket is in debt afterwards, so a
    batch larger than the burst simply waits longer.
    """

    def __init__(
        self,
        rate: float,
        capacity: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.capacity = max(1.0, capacity)
        self.tokens = self.capacity
        self._clock = clock
        self._sleep = sleep
        self._last = clock()

    def acquire(self, count: float) -> float:
        """Take ``count`` tokens; returns the seconds slept."""
        now = self._clock()
        self.tokens = min(self.capacity, self.tokens + (now - self._last) * self.rate)
        self._last = now
        self.tokens -= count
        if self.tokens >= 0:
            return 0.0
        wait = -self.tokens / self.rate
        self._sleep(wait)
        return wait


class Progress:
    """A progress line: on a terminal rewritten in place, otherwise one line per interval."""

    def __init__(
        self,
        total: int | None,
        stream: TextIO | None = None,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        label: str = "replay",
    ) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = interval if interval is not None else (1.0 if self.tty else 10.0)
        self.clock = clock
        self.label = label
        self.started = clock()
        self._last_print = -1e18

    def line(self, done: int) -> str:
        """The progress text for ``done`` messages."""
        elapsed = max(1e-9, self.clock() - self.started)
        rate = done / elapsed
        parts = [f"{self.label}: {done:,}"]
        if self.total:
            share = min(100.0, 100.0 * done / self.total)
            parts[0] += f"/{self.total:,} messages ({share:.1f}%)"
        else:
            parts[0] += " messages"
        parts.append(f"{rate:,.0f} msg/s")
        parts.append(f"elapsed {format_duration(elapsed)}")
        if self.total and rate > 0 and done < self.total:
            parts.append(f"eta {format_duration((self.total - done) / rate)}")
        return " · ".join(parts)

    def update(self, done: int, force: bool = False) -> None:
        """Print the line if the interval has passed (or ``force``)."""
        now = self.clock()
        if not force and now - self._last_print < self.interval:
            return
        self._last_print = now
        if self.tty:
            self.stream.write("\r" + self.line(done) + "\x1b[K")
        else:
            self.stream.write(self.line(done) + "\n")
        self.stream.flush()

    def finish(self, done: int) -> None:
        """The final line (and a newline on a terminal)."""
        self.update(done, force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


@dataclass(slots=True)
class SendSummary:
    """What a replay over HTTP did."""

    sent: int = 0
    batches: int = 0
    body_bytes: int = 0
    retries: int = 0
    dropped_properties: int = 0  # properties the HTTP API cannot carry (separator characters)
    seconds: float = 0.0
    first_msg_id: str | None = None  # first id assigned by the target server
    last_msg_id: str | None = None


class HttpReplaySender:
    """Buffers messages into batches and sends them to one topic, rate-limited, with retries."""

    def __init__(
        self,
        base_url: str,
        target_topic: str,
        batch_size: int = 100,
        max_batch_bytes: int = 1024 * 1024,
        rate: float | None = 500.0,
        timeout: float = 30.0,
        retries: int = 5,
        copy_properties: bool = True,
        progress: Progress | None = None,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        token: str | None = None,
    ) -> None:
        self.path = f"/v1/topics/{quote(target_topic, safe='')}/messages"
        self.batch_size = batch_size
        self.max_batch_bytes = max_batch_bytes
        self.bucket = TokenBucket(rate, batch_size, clock, sleep) if rate else None
        self.retries = retries
        self.copy_properties = copy_properties
        self.progress = progress
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = client or httpx.Client(
            base_url=base_url.rstrip("/"), timeout=timeout, headers=headers
        )
        self._owns_client = client is None
        self._sleep = sleep
        self._pending: list[dict[str, object]] = []
        self._pending_bytes = 0
        self._pending_body = 0
        self._started = time.monotonic()
        self._run = secrets.token_hex(8)  # names this run's batches in their Idempotency-Keys
        self._batch_number = 0
        self.summary = SendSummary()

    def add(self, message: ReplayMessage) -> None:
        """Queue one message; sends a batch when it is full."""
        payload = message_payload(message, self.copy_properties)
        self.summary.dropped_properties += replayable_properties(
            message.properties, self.copy_properties
        )[1]
        size = payload_size(payload)
        if self._pending and self._pending_bytes + size > self.max_batch_bytes:
            self.flush()
        self._pending.append(payload)
        self._pending_bytes += size
        self._pending_body += len(message.body)
        if len(self._pending) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        """Send what is queued (one request)."""
        if not self._pending:
            return
        batch, body = self._pending, self._pending_body
        self._pending, self._pending_bytes, self._pending_body = [], 0, 0
        if self.bucket is not None:
            self.bucket.acquire(len(batch))
        self._batch_number += 1
        key = f"replay-{self._run}-{self._batch_number}"
        answer = self._post({"messages": batch}, key)
        self._record(batch, body, answer)

    def close(self) -> SendSummary:
        """Send the rest, close the connection and return the summary."""
        try:
            self.flush()
        finally:
            if self._owns_client:
                self.client.close()
        self.summary.seconds = time.monotonic() - self._started
        if self.progress is not None:
            self.progress.finish(self.summary.sent)
        return self.summary

    def _record(self, batch: list[dict[str, object]], body: int, answer: list[object]) -> None:
        summary = self.summary
        summary.sent += len(batch)
        summary.batches += 1
        summary.body_bytes += body
        ids = [item.get("msg_id") for item in answer if isinstance(item, dict)]
        if ids and summary.first_msg_id is None:
            summary.first_msg_id = str(ids[0])
        if ids:
            summary.last_msg_id = str(ids[-1])
        if self.progress is not None:
            self.progress.update(summary.sent)

    def _post(self, request: dict[str, object], key: str) -> list[object]:
        """POST one batch; retries transport errors and 408/425/429/5xx with backoff.

        Every attempt carries the batch's ``Idempotency-Key``, so a retry after a lost answer
        gets the first receipts instead of storing the batch twice.
        """
        count = len(request["messages"])  # type: ignore[arg-type]
        headers = {"Idempotency-Key": key}
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = self.client.post(self.path, json=request, headers=headers)
            except httpx.TransportError as exc:
                if last:
                    raise ReplayError(f"sending a batch failed {attempt + 1} times: {exc}") from exc
                self._back_off(attempt, None)
                continue
            if response.status_code in RETRYABLE_STATUS and not last:
                self._back_off(attempt, response.headers.get("retry-after"))
                continue
            return _accepted(response, count)
        raise ReplayError("unreachable")  # pragma: no cover

    def _back_off(self, attempt: int, retry_after: str | None) -> None:
        self.summary.retries += 1
        delay = min(10.0, 0.25 * 2**attempt)
        if retry_after and retry_after.strip().isdigit():
            delay = min(60.0, float(retry_after))
        self._sleep(delay)


def _accepted(response: httpx.Response, count: int) -> list[object]:
    """The per-message answers of a successful send; ReplayError otherwise."""
    if not response.is_success:
        raise ReplayError(
            f"the server refused a batch of {count}: HTTP {response.status_code} "
            f"{_problem(response)}"
        )
    try:
        answer = response.json()
    except ValueError as exc:
        raise ReplayError(f"the server answered {response.status_code} without JSON") from exc
    messages = answer.get("messages") if isinstance(answer, dict) else None
    if not isinstance(messages, list) or len(messages) != count:
        raise ReplayError(
            f"the server acknowledged {len(messages) if isinstance(messages, list) else 0} "
            f"of {count} messages"
        )
    return messages


def _problem(response: httpx.Response) -> str:
    """The detail of a problem+json answer, or the start of the body."""
    try:
        problem = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(problem, dict):
        parts = [str(problem[k]) for k in ("code", "title", "detail") if problem.get(k)]
        if parts:
            return ": ".join(parts)
    return response.text[:300]
