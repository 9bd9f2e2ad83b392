"""Re-sending messages through spoolmq's HTTP API, in batches, under a rate limit (no pyspark).

``POST /v1/topics/{topic}/messages`` with ``{"messages": [{"body": "<base64>",
"body_encoding": "base64", "tags": "T", "keys": ["k1"], "properties": {"REPLAY_OF": "<id>"}}]}``
answers 201 with one entry per message. Each replayed message carries ``REPLAY_OF=<msg_id>``
of the original, so consumers can tell replays apart. Each batch carries an
``Idempotency-Key`` made of this run's random id and the batch's number: a batch whose answer
was lost is sent again with the same key, and the server answers the first receipts instead of
storing it twice. (A second run of the same replay has other keys: it replays again.)

Batches go through :class:`spark_jobs.http_client.SpoolmqClient`, whose rules -- the same as
the Spark source's and sink's -- say which answers are retried, to which endpoint and after
how long.
"""

from __future__ import annotations

import base64
import json
import secrets
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TextIO

from spark_jobs.errors import SpoolmqError
from spark_jobs.formatting import format_duration
from spark_jobs.http_client import Sent, SpoolmqClient
from spark_jobs.properties import SYSTEM_PROPERTIES as STORED_SYSTEM_PROPERTIES
from spark_jobs.properties import sendable_properties

REPLAY_OF: Final = "REPLAY_OF"
SYSTEM_PROPERTIES: Final = STORED_SYSTEM_PROPERTIES | {REPLAY_OF}
"""Never copied to a replay: the system properties, and the original's own REPLAY_OF."""
_JSON_OVERHEAD: Final = 96  # field names and punctuation of one message in the request


class ReplayError(SpoolmqError):
    """The server acknowledged a batch with other than one receipt per message. (A refusal,
    or no answer after every retry, is the client's :mod:`spark_jobs.errors`.)"""


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
    return sendable_properties(properties, SYSTEM_PROPERTIES)


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
    empty_bodies: int = 0  # messages left out: a broker refuses an empty body
    seconds: float = 0.0
    first_msg_id: str | None = None  # first id assigned by the target server
    last_msg_id: str | None = None


class HttpReplaySender:
    """Buffers messages into batches and sends them to one topic through ``client``,
    rate-limited; the client retries each batch under its own key. The client stays its
    caller's to close."""

    def __init__(
        self,
        client: SpoolmqClient,
        target_topic: str,
        batch_size: int = 100,
        max_batch_bytes: int = 1024 * 1024,
        rate: float | None = 500.0,
        copy_properties: bool = True,
        progress: Progress | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.topic = target_topic
        self.batch_size = batch_size
        self.max_batch_bytes = max_batch_bytes
        self.bucket = TokenBucket(rate, batch_size, clock, sleep) if rate else None
        self.copy_properties = copy_properties
        self.progress = progress
        self._pending: list[dict[str, object]] = []
        self._pending_bytes = 0
        self._pending_body = 0
        self._started = time.monotonic()
        self._retried_before = client.retried
        self._run = secrets.token_hex(8)  # names this run's batches in their Idempotency-Keys
        self._batch_number = 0
        self.summary = SendSummary()

    def add(self, message: ReplayMessage) -> None:
        """Queue one message; sends a batch when it is full. A message with an empty body
        (a store may hold one from before brokers refused them) is left out and counted."""
        if not message.body:
            self.summary.empty_bodies += 1
            return
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
        """Send what is queued (one keyed send, retried by the client)."""
        if not self._pending:
            return
        batch, body = self._pending, self._pending_body
        self._pending, self._pending_bytes, self._pending_body = [], 0, 0
        if self.bucket is not None:
            self.bucket.acquire(len(batch))
        self._batch_number += 1
        key = f"replay-{self._run}-{self._batch_number}"
        try:
            sent = self.client.send(self.topic, {"messages": batch}, key)
        finally:
            self.summary.retries = self.client.retried - self._retried_before
        self._record(batch, body, receipts_of(sent, len(batch)))

    def close(self) -> SendSummary:
        """Send the rest and return the summary."""
        self.flush()
        self.summary.seconds = time.monotonic() - self._started
        if self.progress is not None:
            self.progress.finish(self.summary.sent)
        return self.summary

    def _record(self, batch: list[dict[str, object]], body: int, receipts: list[Any]) -> None:
        summary = self.summary
        summary.sent += len(batch)
        summary.batches += 1
        summary.body_bytes += body
        ids = [item.get("msg_id") for item in receipts if isinstance(item, dict)]
        if ids and summary.first_msg_id is None:
            summary.first_msg_id = str(ids[0])
        if ids:
            summary.last_msg_id = str(ids[-1])
        if self.progress is not None:
            self.progress.update(summary.sent)


def receipts_of(sent: Sent, count: int) -> list[Any]:
    """The receipts of a batch of ``count`` messages; ReplayError unless there is one each."""
    if len(sent.receipts) != count:
        raise ReplayError(f"the server acknowledged {len(sent.receipts)} of {count} messages")
    return sent.receipts
