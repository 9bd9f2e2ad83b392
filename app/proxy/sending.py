"""How a send through the proxy reaches one broker group and is stored there at most once.

**Where it goes:** an explicit cluster-wide ``queue_id``, else the sharding key's hash, else the
client's ``Idempotency-Key``'s hash (the same queue through any proxy, after any failover, so a
retry finds its first copy), else round robin over the queues of groups with a master.

**Every send carries a key:** the client's ``Idempotency-Key``, or one the proxy makes for its
own retries. What happens next depends on how far an attempt got:

* it never reached a broker (connection refused, connect timeout, no free connection, no
  master), or a broker refused it before writing (``NO_MASTER``, ``BROKER_UNAVAILABLE``): a
  round-robin send tries another group; a placed one answers 503 with ``Retry-After``;
* a slave answered 421: the route table is read again and the send tried once more;
* the broker keeps no idempotency keys (``IDEMPOTENCY_UNAVAILABLE``, before anything may have
  been written): a send the proxy keyed itself goes again without its key; a client's key
  gets the refusal;
* it may have been written (the connection broke or timed out after the write, or a 5xx that
  does not say nothing was written): never another group. The same queue of the same group is
  tried again with the same key — on its new master after a failover (the route table is read
  again, the election waited for) — until a broker answers; the broker answers a repeat with
  the first receipts. If no answer comes in time: ``504 OUTCOME_UNKNOWN``, naming the key to
  retry with.

A send is answered within ``send_timeout_s``; one attempt waits at most
``send_attempt_timeout_s`` (:class:`~app.proxy.context.ProxyLimits`).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from app.errors import PROBLEM_MEDIA_TYPE, problem_body
from app.problem_codes import STATUS_BY_CODE
from app.proxy.context import proxy_of
from app.proxy.forward import (
    RETRY_AFTER_S,
    BrokerAnswer,
    BrokerNoAnswerError,
    BrokerUnreachableError,
    ProxyError,
    broker_path,
)
from app.proxy.upstream import Body
from services.cluster import (
    ClusterLabels,
    EtcdUnavailableError,
    NoMasterError,
    QueueRoute,
    TopicRoute,
    topic_route,
)

log = logging.getLogger(__name__)

NOTHING_WRITTEN: Final = frozenset(
    {
        "NOT_MASTER",
        "NO_MASTER",
        "BROKER_UNAVAILABLE",
        "KEY_INDEX_CATCHING_UP",
        "NOT_ENOUGH_IN_SYNC_REPLICAS",
    }
)
"""Codes with which a broker refuses a send before writing anything."""

_KEY_PREFIX: Final = f"spoolmq-proxy-{secrets.token_hex(8)}-"
_KEY_COUNTER: Final = itertools.count(1)


def own_key() -> str:
    """A key for a send that came without one: unique to this proxy process and request."""
    return f"{_KEY_PREFIX}{next(_KEY_COUNTER):x}"


@dataclass(slots=True)
class SendTarget:
    """What a send asks for: its topic, where it goes, its key, and its body for a queue.

    Not changed once made; not frozen either, as one is made for every send and a frozen
    class's ``__init__`` costs four times a plain one's."""

    topic: str
    queue_id: int | None
    sharding_key: str | None
    client_key: str | None
    body_for: Callable[[int], Body]
    """The request body for the chosen group's local queue id."""
    query_for: Callable[[int], bytes] | None
    """The query string for the chosen group's local queue id (None: no query string)."""

    @property
    def placed(self) -> bool:
        """Whether the send names its queue (explicitly or through a key): no other will do."""
        return self.queue_id is not None or self.sharding_key is not None or bool(self.client_key)


class _Attempts:
    """The state of one proxied send across its attempts."""

    def __init__(self, request: Request, target: SendTarget) -> None:
        self.request = request
        self.target = target
        self.proxy = proxy = proxy_of(request)
        self.limits = proxy.limits
        # A clock of its own, not the loop's: on Python 3.11 every asyncio.get_running_loop()
        # makes a getpid system call (its check for a fork), one more per proxied send.
        self.deadline = time.monotonic() + self.limits.send_timeout_s
        self.key: str | None = target.client_key or own_key()
        self.failed: list[str] = []  # groups a round-robin send skips: nothing reached them
        self.pinned: QueueRoute | None = None  # once a send may have been written: its queue
        self.route: TopicRoute | None = None  # the topic's route the last queue was picked from
        self.refreshed = False
        self.pause_s = 0.05
        self.unknown = ""  # why the outcome is unknown

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def queue(self) -> QueueRoute:
        """The queue of the next attempt (the topic's route read again for each)."""
        view = self.proxy.registry.view
        self.route = route = topic_route(view, self.target.topic)
        if self.pinned is not None:
            return self.pinned
        return self.proxy.picker.pick(
            view,
            route,
            self.target.queue_id,
            self.target.sharding_key,
            self.failed,
            idempotency_key=self.target.client_key,
        )

    async def wait_before_retry(self) -> None:
        """Before trying a maybe-written send again: a pause (growing), the route table read."""
        await asyncio.sleep(min(self.pause_s, max(self.remaining(), 0)))
        self.pause_s = min(self.pause_s * 2, 0.5)
        try:
            await self.proxy.registry.refresh()
        except EtcdUnavailableError:
            pass  # the watch keeps the last view; the next pause tries again


async def forward_send(request: Request, target: SendTarget) -> Response:
    """Send to the right group's master: the receipts (in the cluster's terms, with
    ``broker_group``), a broker's refusal, 503 when nothing was sent, or 504
    OUTCOME_UNKNOWN — the rules of the module, in one place."""
    attempts = _Attempts(request, target)
    while time.monotonic() < attempts.deadline:
        queue = attempts.queue()
        answer = await _attempt(attempts, queue)
        if answer is None:
            continue
        if answer.ok:
            return receipts(answer, target.client_key)
        if not await _retry_after_refusal(attempts, queue, answer):
            return answer.response()
    return _outcome_unknown(attempts)


async def _attempt(attempts: _Attempts, queue: QueueRoute) -> BrokerAnswer | None:
    """One attempt; None when the send is to be tried again (raises when it cannot be)."""
    target = attempts.target
    proxy = attempts.proxy
    master = proxy.registry.view.master_of(queue.group)
    if master is None:
        missing = NoMasterError(f"broker group {queue.group!r} has no master right now")
        await _not_sent(attempts, queue, missing)
        return None
    headers = [(b"idempotency-key", attempts.key.encode())] if attempts.key else []
    route = attempts.route
    assert route is not None  # picked with the queue
    local = queue.local_queue_id
    remaining = attempts.remaining()
    try:
        return await proxy.forwarder.call(
            master,
            "POST",
            send_path(target.topic),
            request=attempts.request,
            query=b"" if target.query_for is None else target.query_for(local),
            content=target.body_for(local),
            headers=headers,
            labels=ClusterLabels.of(route, queue.group),
            timeout_s=max(min(remaining, attempts.limits.send_attempt_timeout_s), 0.001),
        )
    except BrokerNoAnswerError as exc:
        _maybe_written(attempts, queue, exc.detail)
        await attempts.wait_before_retry()
        return None
    except BrokerUnreachableError as exc:
        await _not_sent(attempts, queue, exc)
        return None


async def _not_sent(
    attempts: _Attempts, queue: QueueRoute, exc: BrokerUnreachableError | NoMasterError
) -> None:
    """Nothing reached a broker this time: another group, the same one again, or 503."""
    if attempts.pinned is not None:  # an earlier attempt may have been written: wait it out
        await attempts.wait_before_retry()
        return
    if attempts.target.placed:
        raise exc
    attempts.failed.append(queue.group)  # the picker raises NoMasterError when none is left


def _maybe_written(attempts: _Attempts, queue: QueueRoute, why: str) -> None:
    if attempts.pinned is None:
        log.info(
            "send %s to %s of group %s may have been written (%s): trying it again there, "
            "with its key",
            attempts.request.scope.get("state", {}).get("request_id"),
            attempts.target.topic,
            queue.group,
            why,
        )
    attempts.pinned = queue
    attempts.unknown = why


async def _retry_after_refusal(
    attempts: _Attempts, queue: QueueRoute, answer: BrokerAnswer
) -> bool:
    """Whether a broker's non-2xx answer is to be retried (False: it is the answer)."""
    code = answer.problem_code()
    own_key = attempts.key and not attempts.target.client_key
    if code == "IDEMPOTENCY_UNAVAILABLE" and attempts.pinned is None:
        if not own_key:  # nothing written, and the client's key cannot be kept: it is told
            return False
        attempts.key = None  # the broker keeps no keys: nothing written, send without one
        return True
    # Once an attempt may have been written, a keyless repeat could store it twice: the
    # refusal is one more unknown outcome (a 5xx), tried again with the key until the time is up.
    if code in NOTHING_WRITTEN or answer.status == 421:
        if attempts.pinned is not None:
            await attempts.wait_before_retry()
            return True
        if answer.status == 421 and not attempts.refreshed:
            attempts.refreshed = True  # the route table may be behind a failover
            try:
                await attempts.proxy.registry.refresh()
            except EtcdUnavailableError:
                return False
            return True
        if not attempts.target.placed:  # nothing written: another group will do
            attempts.failed.append(queue.group)
            return True
        return False
    if answer.status >= 500 and attempts.key:
        _maybe_written(attempts, queue, f"the broker answered {answer.status} {code or ''}")
        await attempts.wait_before_retry()
        return True
    if answer.status >= 500:  # no key to retry with safely
        _maybe_written(attempts, queue, f"the broker answered {answer.status} {code or ''}")
        attempts.deadline = time.monotonic()
        return True
    return False


def receipts(answer: BrokerAnswer, client_key: str | None) -> Response:
    """A broker's receipts (labelled by the broker) as the client gets them: a replay of a
    retry with the proxy's own key is no replay to the client."""
    kept = answer.kept
    if not client_key:
        for name, _ in kept:
            if name == b"idempotent-replayed":
                kept = [(k, v) for k, v in kept if k != b"idempotent-replayed"]
                break
    return answer.response(kept=kept)


def _outcome_unknown(attempts: _Attempts) -> Response:
    """504: the send may or may not be stored; the key to retry with, for a safe retry."""
    request = attempts.request
    request_id = request.scope.get("state", {}).get("request_id", "")
    if attempts.pinned is None:  # nothing was sent, and the time is up
        raise ProxyError(
            "BROKER_UNAVAILABLE",
            f"no broker took the send within {attempts.limits.send_timeout_s:g} s; nothing "
            "was stored",
            {"Retry-After": str(RETRY_AFTER_S)},
        )
    key = attempts.key
    retry = (
        f"retry it with the same Idempotency-Key ({key!r})"
        if key
        else "the broker keeps no idempotency keys (it runs without the message index), so a "
        "retry may store it twice"
    )
    detail = (
        f"the send to group {attempts.pinned.group} may or may not have been stored "
        f"({attempts.unknown}) and no broker confirmed it within "
        f"{attempts.limits.send_timeout_s:g} s: {retry}"
    )
    log.warning("send %s: outcome unknown: %s", request_id, detail)
    extensions = {"broker_group": attempts.pinned.group, "idempotency_key": key}
    body = problem_body(
        STATUS_BY_CODE["OUTCOME_UNKNOWN"],
        "OUTCOME_UNKNOWN",
        detail,
        request.url.path,
        request_id,
        extensions=extensions,
    )
    return Response(body, STATUS_BY_CODE["OUTCOME_UNKNOWN"], media_type=PROBLEM_MEDIA_TYPE)


@functools.lru_cache(maxsize=4096)
def send_path(topic: str) -> str:
    return broker_path("v1", "topics", topic, "messages")
