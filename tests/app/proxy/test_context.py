"""What every proxy endpoint shares (:mod:`app.proxy.context`): the proxy's parts on its app,
and a request's query, parsed once and read as the broker reads it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.requests import Request

from app.errors import ApiError
from app.proxy.context import (
    PROXY_STATE,
    Proxy,
    ProxyLimits,
    budget_shares,
    cluster_view,
    forwarder,
    int_param,
    params_without,
    proxy_limits,
    proxy_of,
    query_items,
    query_param,
    route_registry,
    send_picker,
)
from app.proxy.fanout import BudgetShares
from services.cluster import SendPicker


def request_with(query: str | bytes, parts: Any = None) -> Request:
    raw = query.encode("latin-1") if isinstance(query, str) else query
    scope = {
        "type": "http",
        "method": "GET",
        "headers": [],
        "query_string": raw,
        "app": SimpleNamespace(state=SimpleNamespace(proxy=parts)),
    }
    return Request(scope)


@settings(max_examples=500, deadline=None)
@given(
    raw=st.lists(
        st.sampled_from(["&", "=", "%", "+", "%20", "%zz", ";", "max_messages", "32", "\u00e9"])
        | st.text(max_size=4),
        max_size=8,
    ).map("".join)
)
def test_query_items_are_parse_qsls(raw: str) -> None:
    """The query's parameters as parse_qsl gives them (blank values kept), whether they need
    unquoting or not: empty pieces, names without ``=``, several ``=``, non-ASCII text."""
    try:
        encoded = raw.encode("latin-1")
    except UnicodeEncodeError:
        encoded = raw.encode()  # as a client's bytes reach the server
    text = encoded.decode("latin-1")
    assert query_items(request_with(encoded)) == parse_qsl(text, keep_blank_values=True)


def test_a_query_is_parsed_once_per_request() -> None:
    request = request_with("a=1&b=2&a=3")
    first = query_items(request)
    assert first == [("a", "1"), ("b", "2"), ("a", "3")]
    assert query_items(request) is first


def test_a_parameter_is_read_by_its_first_value() -> None:
    request = request_with("max_messages=5&max_messages=9&tags=A&wait%5Fms=7")
    assert query_param(request, "max_messages") == "5"
    assert query_param(request, "wait_ms") == "7"
    assert query_param(request, "nope") is None
    assert int_param(request, "max_messages", 32) == 5
    assert int_param(request, "nope", 32) == 32
    assert params_without(request, "max_messages") == [("tags", "A"), ("wait_ms", "7")]


@pytest.mark.parametrize("value", ["x", "", "1.5", "9" * 5000])
def test_a_number_that_is_not_one_is_the_clients_mistake(value: str) -> None:
    with pytest.raises(ApiError) as refused:
        int_param(request_with(f"wait_ms={value}"), "wait_ms", 0)
    assert refused.value.code == "VALIDATION_FAILED"
    assert refused.value.detail.startswith("wait_ms is an integer, not ")


def test_the_proxys_parts_are_read_from_its_app() -> None:
    view: Any = object()
    registry: Any = SimpleNamespace(view=view)
    sender: Any = object()
    parts = Proxy(ProxyLimits(send_timeout_s=3), registry, sender, SendPicker(), BudgetShares())
    request = request_with("", parts)
    assert proxy_limits(request).send_timeout_s == 3
    assert route_registry(request) is registry
    assert cluster_view(request) is view
    assert forwarder(request) is sender
    assert send_picker(request) is parts.picker
    assert budget_shares(request) is parts.shares


def _parts() -> Proxy:
    registry: Any = SimpleNamespace()
    return Proxy(ProxyLimits(), registry, registry, SendPicker(), BudgetShares())


def test_the_proxy_comes_from_the_lifespan_state_before_the_app() -> None:
    """A server that ran the lifespan puts its state in every request's scope; a client that
    runs no lifespan (an ASGI transport in process) leaves the app's state to read."""
    in_state, on_app = _parts(), _parts()
    with_state = request_with("", on_app)
    with_state.scope["state"] = {PROXY_STATE: in_state}
    assert proxy_of(with_state) is in_state
    empty_state = request_with("", on_app)
    empty_state.scope["state"] = {}
    assert proxy_of(empty_state) is on_app
    assert proxy_of(request_with("", on_app)) is on_app  # no state in the scope at all
