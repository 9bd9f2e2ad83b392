"""What every proxy endpoint shares: the request's cluster view, forwarder and send picker,
small parsing helpers, and fan-outs to several broker groups at once."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from fastapi import Request

from app.errors import ApiError
from app.proxy.forward import BrokerAnswer, Forwarder, ProxyError
from services.cluster import ClusterView, NoMasterError, RouteRegistry, SendPicker

DEFAULT_MAX_MESSAGES = 32
ROTATION = itertools.count()


def route_registry(request: Request) -> RouteRegistry:
    registry: RouteRegistry = request.app.state.registry
    return registry


def cluster_view(request: Request) -> ClusterView:
    return route_registry(request).view


def forwarder(request: Request) -> Forwarder:
    shared: Forwarder = request.app.state.forwarder
    return shared


def send_picker(request: Request) -> SendPicker:
    picker: SendPicker = request.app.state.picker
    return picker


def json_body(raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        raise ApiError("MALFORMED_JSON", "the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise ApiError("VALIDATION_FAILED", "the request body is a JSON object")
    return data


def int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError("VALIDATION_FAILED", f"{name} is an integer, not {raw!r}") from None


def params_without(request: Request, *names: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in request.query_params.multi_items() if k not in names]


def rotated(items: Sequence[str]) -> list[str]:
    if not items:
        return []
    start = next(ROTATION) % len(items)
    return list(items[start:]) + list(items[:start])


async def each_group(
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


def all_unreachable(answers: Sequence[tuple[str, Any]]) -> ProxyError | None:
    errors = [a for _, a in answers if isinstance(a, ProxyError)]
    return errors[0] if errors and len(errors) == len(answers) else None


async def first_non_empty(
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
