"""The proxy's endpoints: the broker's HTTP API, served across every broker group.

Each handler reads the current :class:`ClusterView`, decides with
:mod:`services.cluster.proxy_routing`, forwards, and rewrites local queue ids to cluster-wide
ones (and receipt handles to group-prefixed ones) on the way back.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from app.errors import ApiError
from app.proxy.forward import BrokerAnswer, BrokerUnreachableError, Forwarder, ProxyError
from app.responses import OrjsonResponse
from app.schemas.common import MAX_QUEUES
from services.cluster import BrokerMember, ClusterView, RouteRegistry, TopicRoute, spread_queues
from services.cluster.proxy_routing import (
    NoMasterError,
    SendPicker,
    batch_queue_id,
    batch_sharding_key,
    globalize,
    groups_with_master,
    localize_send,
    master_of,
    merge_group_pulls,
    prefix_handle,
    queue_route,
    readers,
    split_commits,
    split_handle,
    topic_route,
)

router = APIRouter()

DEFAULT_MAX_MESSAGES = 32
_rotation = itertools.count()


def _registry(request: Request) -> RouteRegistry:
    registry: RouteRegistry = request.app.state.registry
    return registry


def _view(request: Request) -> ClusterView:
    return _registry(request).view


def _forwarder(request: Request) -> Forwarder:
    forwarder: Forwarder = request.app.state.forwarder
    return forwarder


def _picker(request: Request) -> SendPicker:
    picker: SendPicker = request.app.state.picker
    return picker


def _json_body(raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        raise ApiError("MALFORMED_JSON", "the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError("VALIDATION_FAILED", "the request body is a JSON object")
    return data


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError("VALIDATION_FAILED", f"{name} is an integer, not {raw!r}") from None


def _params_without(request: Request, *names: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in request.query_params.multi_items() if k not in names]


def _rotated(items: Sequence[str]) -> list[str]:
    if not items:
        return []
    start = next(_rotation) % len(items)
    return list(items[start:]) + list(items[:start])


# ================================================================ topics and routes


@router.put("/v1/topics/{topic}")
async def put_topic(topic: str, request: Request) -> Response:
    """Spread the topic's queues over groups, create it on each master, then store the route."""
    body = _json_body(await request.body())
    view = _view(request)
    groups = _hosting_groups(view, body.pop("groups", None))
    if not groups:
        raise NoMasterError("no broker group has a master to host the topic")
    count = body.get("write_queue_nums", 8)
    most = MAX_QUEUES * len(groups)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= most:
        raise ApiError("VALIDATION_FAILED", f"write_queue_nums is an integer from 1 to {most}")
    route = spread_queues(topic, count, groups)
    masters = {g: master_of(view, g) for g in route.groups()}
    created = False
    for group, master in masters.items():
        local = len(route.queues_of(group))
        local_body = {**body, "write_queue_nums": local, "read_queue_nums": local}
        answer = await _forwarder(request).call(
            master, "PUT", f"/v1/topics/{topic}", json=local_body, headers=request.headers
        )
        if not answer.ok:
            return answer.response()
        created = created or answer.status == 201
    await _registry(request).put_topic_route(route)
    await _registry(request).refresh()
    return OrjsonResponse(_route_out(route), status_code=201 if created else 200)


def _hosting_groups(view: ClusterView, given: Any) -> list[str]:
    """The groups a new topic goes to: those named (each known), else every group with a master."""
    if given is None:
        return groups_with_master(view)
    if not isinstance(given, list) or not given or not all(isinstance(g, str) for g in given):
        raise ApiError("VALIDATION_FAILED", "groups is a non-empty list of broker group names")
    unknown = sorted(set(given) - set(view.groups))
    if unknown:
        raise ApiError("VALIDATION_FAILED", f"no broker group is named {', '.join(unknown)}")
    return list(given)


@router.get("/v1/topics/{topic}/route")
async def get_route(topic: str, request: Request) -> Response:
    return OrjsonResponse(_route_out(topic_route(_view(request), topic)))


def _route_out(route: TopicRoute) -> dict[str, Any]:
    return {
        "topic": route.topic,
        "queues": [
            {"queue_id": q.queue_id, "group": q.group, "local_queue_id": q.local_queue_id}
            for q in route.queues
        ],
    }


# ================================================================ send


@router.post("/v1/topics/{topic}/messages")
async def send(topic: str, request: Request) -> Response:
    """Pick the cluster-wide queue, send to its group's master with the local id."""
    raw = await request.body()
    is_json = request.headers.get("content-type", "").split(";")[0].strip().endswith("json")
    body = _json_body(raw) if is_json else {}
    if is_json:
        explicit, key = batch_queue_id(body), batch_sharding_key(body)
    else:
        explicit = _int_param(request, "queue_id", -1)
        explicit = None if explicit < 0 and "queue_id" not in request.query_params else explicit
        key = request.query_params.get("sharding_key")
    failed: list[str] = []
    refreshed = False
    while True:
        view = _view(request)
        route = topic_route(view, topic)
        queue = _picker(request).pick(view, route, explicit, key, failed)
        try:
            master = master_of(view, queue.group)
            if is_json:
                answer = await _forwarder(request).call(
                    master,
                    "POST",
                    f"/v1/topics/{topic}/messages",
                    json=localize_send(body, queue.local_queue_id),
                    headers=request.headers,
                )
            else:
                params = _params_without(request, "queue_id", "sharding_key")
                params.append(("queue_id", str(queue.local_queue_id)))
                answer = await _forwarder(request).call(
                    master,
                    "POST",
                    f"/v1/topics/{topic}/messages",
                    params=params,
                    content=raw,
                    headers=request.headers,
                )
        except (BrokerUnreachableError, NoMasterError):
            if explicit is not None or key is not None:
                raise
            failed.append(queue.group)
            continue
        if answer.status == 421 and not refreshed:
            refreshed = True  # the route table is behind a failover: read it again
            await _registry(request).refresh()
            continue
        if not answer.ok:
            return answer.response()
        out = answer.json()
        globalize(route, queue.group, out.get("messages", ()))
        return answer.with_body(out)


# ================================================================ reads of one queue, lookups


@router.get("/v1/topics/{topic}/queues/{queue_id}/messages")
async def pull_queue(topic: str, queue_id: int, request: Request) -> Response:
    """Pull one cluster-wide queue from its group: the master, or a slave if it is down."""
    view = _view(request)
    route = topic_route(view, topic)
    queue = queue_route(route, queue_id)
    writes = "commit_offset" in request.query_params
    members = [master_of(view, queue.group)] if writes else readers(view, queue.group)
    _, answer = await _forwarder(request).call_any(
        members,
        "GET",
        f"/v1/topics/{topic}/queues/{queue.local_queue_id}/messages",
        params=request.query_params.multi_items(),
        headers=request.headers,
    )
    if not answer.ok:
        return answer.response()
    out = answer.json()
    out["queue_id"] = queue_id
    globalize(route, queue.group, out.get("messages", ()))
    return answer.with_body(out)


async def _each_group(
    groups: Sequence[str],
    ask: Callable[[str], Awaitable[BrokerAnswer]],
) -> list[tuple[str, BrokerAnswer | ProxyError]]:
    """Ask every group concurrently; an unreachable group is kept as its error."""

    async def one(group: str) -> BrokerAnswer | ProxyError:
        try:
            return await ask(group)
        except ProxyError as exc:  # unreachable, or no replica known
            return exc

    answers = await asyncio.gather(*(one(g) for g in groups))
    return list(zip(groups, answers, strict=True))


def _all_unreachable(answers: Sequence[tuple[str, Any]]) -> ProxyError | None:
    errors = [a for _, a in answers if isinstance(a, ProxyError)]
    return errors[0] if errors and len(errors) == len(answers) else None


@router.get("/v1/topics/{topic}/messages")
async def query_by_key(topic: str, request: Request) -> Response:
    """Ask every group hosting the topic; merge what they found, oldest first."""
    view = _view(request)
    route = topic_route(view, topic)
    limit = _int_param(request, "max_messages", DEFAULT_MAX_MESSAGES)

    async def ask(group: str) -> BrokerAnswer:
        _, answer = await _forwarder(request).call_any(
            readers(view, group),
            "GET",
            f"/v1/topics/{topic}/messages",
            params=request.query_params.multi_items(),
            headers=request.headers,
        )
        return answer

    answers = await _each_group(route.groups(), ask)
    down = _all_unreachable(answers)
    if down is not None:
        raise down
    found: list[dict[str, Any]] = []
    for group, answer in answers:
        if isinstance(answer, ProxyError):
            continue
        if not answer.ok:
            return answer.response()
        messages = answer.json().get("messages", [])
        globalize(route, group, messages)
        found.extend(messages)
    found.sort(key=lambda m: m.get("store_timestamp", 0))
    return OrjsonResponse({"topic": topic, "messages": found[:limit]})


@router.get("/v1/messages/{msg_id}")
async def get_message(msg_id: str, request: Request) -> Response:
    """Ask every group for the message; the one that has it answers."""
    view = _view(request)

    async def ask(group: str) -> BrokerAnswer:
        _, answer = await _forwarder(request).call_any(
            readers(view, group),
            "GET",
            f"/v1/messages/{msg_id}",
            params=request.query_params.multi_items(),
            headers=request.headers,
        )
        return answer

    answers = await _each_group(sorted(view.groups), ask)
    down = _all_unreachable(answers)
    if down is not None:
        raise down
    missing: BrokerAnswer | None = None
    for group, answer in answers:
        if isinstance(answer, ProxyError):
            continue
        if answer.ok:
            out = answer.json()
            route = view.topics.get(str(out.get("topic")))
            if route is not None:
                globalize(route, group, [out])
            return answer.with_body(out)
        missing = missing or answer
    if missing is None:
        raise ProxyError(404, "MESSAGE_NOT_FOUND", f"no broker group has message {msg_id}")
    return missing.response()


# ================================================================ consumer groups


@router.api_route("/v1/groups/{group}", methods=["PUT", "DELETE"])
async def group_config(group: str, request: Request) -> Response:
    """A consumer group's config goes to every master (each group keeps its own offsets)."""
    view = _view(request)
    content = await request.body()
    first: BrokerAnswer | None = None
    for name in groups_with_master(view):
        answer = await _forwarder(request).call(
            master_of(view, name),
            request.method,
            f"/v1/groups/{group}",
            content=content,
            headers=request.headers,
        )
        if not answer.ok:
            return answer.response()
        first = first or answer
    if first is None:
        raise NoMasterError("no broker group has a master right now")
    return first.response()


@router.get("/v1/groups/{group}/topics/{topic}/messages")
async def pull_group(group: str, topic: str, request: Request) -> Response:
    """Pull from every group hosting the topic, within ``max_messages`` overall.

    Groups are asked in turn (a rotating start, so none starves) with what is left of the
    budget; when none has anything and the pull long-polls, all are asked at once and the
    first answer with messages is taken.
    """
    view = _view(request)
    route = topic_route(view, topic)
    budget = _int_param(request, "max_messages", DEFAULT_MAX_MESSAGES)
    wait_ms = _int_param(request, "wait_ms", 0)
    auto_commit = request.query_params.get("auto_commit", "").lower() in ("true", "1", "yes")
    params = _params_without(request, "max_messages", "wait_ms")

    async def ask(name: str, max_messages: int, wait: int) -> BrokerAnswer:
        members = [master_of(view, name)] if auto_commit else readers(view, name)
        _, answer = await _forwarder(request).call_any(
            members,
            "GET",
            f"/v1/groups/{group}/topics/{topic}/messages",
            params=[*params, ("max_messages", str(max_messages)), ("wait_ms", str(wait))],
            headers=request.headers,
        )
        return answer

    answers: list[tuple[str, dict[str, Any]]] = []
    reached = 0
    last_error: ProxyError | NoMasterError | None = None
    left = budget
    for name in _rotated(route.groups()):
        if left <= 0:
            break
        try:
            answer = await ask(name, left, 0)
        except (ProxyError, NoMasterError) as exc:
            last_error = exc
            continue
        reached += 1
        if not answer.ok:
            return answer.response()
        out = answer.json()
        answers.append((name, out))
        left -= len(out.get("messages", ()))
    if reached == 0 and last_error is not None:
        raise last_error
    if left == budget and wait_ms > 0:
        polled = await _first_non_empty(
            [name for name, _ in answers], lambda name: ask(name, budget, wait_ms)
        )
        if polled is not None:
            answers = [polled]
    return OrjsonResponse(merge_group_pulls(route, answers, group))


async def _first_non_empty(
    groups: Sequence[str], ask: Callable[[str], Awaitable[BrokerAnswer]]
) -> tuple[str, dict[str, Any]] | None:
    """Long-poll every group at once; the first answer with messages wins, the rest go."""

    async def one(name: str) -> tuple[str, dict[str, Any]] | None:
        try:
            answer = await ask(name)
        except (ProxyError, NoMasterError):
            return None
        if not answer.ok:
            return None
        out = answer.json()
        return (name, out) if out.get("messages") else None

    tasks = [asyncio.create_task(one(name)) for name in groups]
    try:
        for finished in asyncio.as_completed(tasks):
            result = await finished
            if result is not None:
                return result
        return None
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@router.put("/v1/groups/{group}/topics/{topic}/queues/{queue_id}/offset")
async def commit_offset(group: str, topic: str, queue_id: int, request: Request) -> Response:
    view = _view(request)
    route = topic_route(view, topic)
    queue = queue_route(route, queue_id)
    answer = await _forwarder(request).call(
        master_of(view, queue.group),
        "PUT",
        f"/v1/groups/{group}/topics/{topic}/queues/{queue.local_queue_id}/offset",
        content=await request.body(),
        headers=request.headers,
    )
    if not answer.ok:
        return answer.response()
    out = answer.json()
    globalize(route, queue.group, out.get("offsets", ()))
    return answer.with_body(out)


@router.post("/v1/groups/{group}/offsets")
async def commit_offsets(group: str, request: Request) -> Response:
    """Split commits of cluster-wide queues into one batch per broker group."""
    body = _json_body(await request.body())
    offsets = body.get("offsets")
    if (
        not isinstance(offsets, list)
        or not offsets
        or not all(isinstance(o, dict) for o in offsets)
    ):
        raise ApiError("VALIDATION_FAILED", "offsets is a non-empty list of objects")
    view = _view(request)
    per_group = split_commits(offsets, view.topics)
    for name, local in per_group.items():
        answer = await _forwarder(request).call(
            master_of(view, name),
            "POST",
            f"/v1/groups/{group}/offsets",
            json={"offsets": local},
            headers=request.headers,
        )
        if not answer.ok:
            return answer.response()
    return OrjsonResponse({"group": group, "offsets": offsets})


# ================================================================ POP


@router.post("/v1/groups/{group}/topics/{topic}/receive")
async def receive(group: str, topic: str, request: Request) -> Response:
    """Receive from the groups in turn; long-poll all at once when none has anything."""
    body = _json_body(await request.body())
    view = _view(request)
    route = topic_route(view, topic)
    wait_ms = body.get("wait_ms", 0)

    async def ask(name: str, wait: Any) -> BrokerAnswer:
        answer = await _forwarder(request).call(
            master_of(view, name),
            "POST",
            f"/v1/groups/{group}/topics/{topic}/receive",
            json={**body, "wait_ms": wait},
            headers=request.headers,
        )
        return answer

    reached = 0
    last_error: ProxyError | NoMasterError | None = None
    chosen: tuple[str, dict[str, Any]] | None = None
    for name in _rotated(route.groups()):
        try:
            answer = await ask(name, 0)
        except (ProxyError, NoMasterError) as exc:
            last_error = exc
            continue
        reached += 1
        if not answer.ok:
            return answer.response()
        out = answer.json()
        if out.get("messages"):
            chosen = (name, out)
            break
    if reached == 0 and last_error is not None:
        raise last_error
    if chosen is None and isinstance(wait_ms, int) and wait_ms > 0:
        chosen = await _first_non_empty(route.groups(), lambda name: ask(name, wait_ms))
    if chosen is None:
        return OrjsonResponse({"group": group, "topic": topic, "messages": []})
    name, out = chosen
    for message in out.get("messages", ()):
        message["receipt_handle"] = prefix_handle(name, message["receipt_handle"])
        message["broker_group"] = name
    globalize(route, name, out.get("messages", ()))
    return OrjsonResponse(out)


@router.post("/v1/groups/{group}/acks")
async def ack(group: str, request: Request) -> Response:
    """Send each handle back to the group that issued it; one outcome per handle, in order."""
    body = _json_body(await request.body())
    handles = body.get("receipt_handles")
    if not isinstance(handles, list) or not handles or not all(isinstance(h, str) for h in handles):
        raise ApiError("VALIDATION_FAILED", "receipt_handles is a non-empty list of strings")
    view = _view(request)
    outcomes: dict[int, dict[str, Any]] = {}
    per_group: dict[str, list[tuple[int, str]]] = {}
    for index, handle in enumerate(handles):
        split = split_handle(handle)
        if split is None or split[0] not in view.groups:
            outcomes[index] = {
                "receipt_handle": handle,
                "outcome": "invalid",
                "detail": "not a receipt handle this proxy issued",
            }
        else:
            per_group.setdefault(split[0], []).append((index, split[1]))
    for name, items in per_group.items():
        answer = await _forwarder(request).call(
            master_of(view, name),
            "POST",
            f"/v1/groups/{group}/acks",
            json={"receipt_handles": [inner for _, inner in items]},
            headers=request.headers,
        )
        if not answer.ok:
            return answer.response()
        for (index, _), result in zip(items, answer.json()["results"], strict=True):
            outcomes[index] = {**result, "receipt_handle": handles[index]}
    return OrjsonResponse({"group": group, "results": [outcomes[i] for i in range(len(handles))]})


@router.post("/v1/groups/{group}/invisibility")
async def change_invisibility(group: str, request: Request) -> Response:
    body = _json_body(await request.body())
    handle = body.get("receipt_handle")
    split = split_handle(handle) if isinstance(handle, str) else None
    view = _view(request)
    if split is None or split[0] not in view.groups:
        raise ProxyError(400, "INVALID_RECEIPT_HANDLE", "not a receipt handle this proxy issued")
    name, inner = split
    answer = await _forwarder(request).call(
        master_of(view, name),
        "POST",
        f"/v1/groups/{group}/invisibility",
        json={**body, "receipt_handle": inner},
        headers=request.headers,
    )
    if not answer.ok:
        return answer.response()
    out = answer.json()
    if isinstance(out.get("receipt_handle"), str):
        out["receipt_handle"] = prefix_handle(name, out["receipt_handle"])
    return answer.with_body(out)


# ================================================================ the proxy itself


@router.get("/healthz")
async def healthz(request: Request) -> Response:
    view = _view(request)
    masters: dict[str, BrokerMember | None] = {g: r.master for g, r in view.groups.items()}
    return OrjsonResponse(
        {
            "status": "ok",
            "cluster": view.cluster,
            "revision": view.revision,
            "masters": {g: m.name if m else None for g, m in masters.items()},
            "slaves": {g: [m.name for m in r.slaves] for g, r in view.groups.items()},
            "topics": sorted(view.topics),
        }
    )
