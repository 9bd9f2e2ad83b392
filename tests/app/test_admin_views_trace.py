"""The message timeline page in a real browser (Debian's Chromium through Playwright): reached
from a key search's results, a DLQ page and a POP group's in-flight page, it shows each traced
step in order with the time since the step before in one format, and each group's state with
what has not happened yet."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from app.admin.views.trace import consumer_text, detail_items, step_rows
from services import Consumer, TraceEvent
from tests.app.browser_support import Admin, layout_faults, needs_chromium
from tests.conftest import LiveServer, start_server, wait_until

STEP_GAP = re.compile(r"^\+(\d+(\.\d)? ms|\d+\.\d\d s|\d+ min( \d+ s)?)$")
"""“After previous” as :func:`storage.durations.format_millis` writes it."""


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The module's server, with message trace on for every topic."""
    live = start_server(tmp_path_factory.mktemp("store"), trace=True)
    yield live
    live.stop()


def test_steps_show_the_time_since_the_one_before_and_since_the_store() -> None:
    events = [
        TraceEvent("stored", 1_000, "M", "Orders"),
        TraceEvent("delivered", 1_012, "M", "Orders", group="billing", attempt=1,
                   consumer=Consumer("app", "10.0.0.5:5000", None),
                   detail={"via": "pull", "delivered_at": 1_012}),
        TraceEvent("acked", 3_512, "M", "Orders", group="billing", attempt=1),
    ]  # fmt: skip
    rows = step_rows(events)
    assert [r.since_previous for r in rows] == ["", "+12 ms", "+2.50 s"]
    assert [r.since_stored for r in rows] == ["0 ms", "12 ms", "2.51 s"]
    assert rows[1].consumer == "token app · 10.0.0.5:5000"
    assert rows[1].detail == [("delivered_at", "1970-01-01 00:00:01.012"), ("via", "pull")]
    assert detail_items({"invisible_ms": 30_000}) == [("invisible_ms", "30.00 s")]
    assert consumer_text(None) == "" and detail_items({"replay": False}) == [("replay", "no")]


def send(api: httpx.Client, topic: str, body: str, key: str) -> dict[str, Any]:
    answer = api.post(f"/v1/topics/{topic}/messages", json={"body": body, "keys": [key]})
    assert answer.status_code == 201, answer.text
    return dict(answer.json()["messages"][0])


def traced_types(api: httpx.Client, msg_id: str) -> list[str]:
    answer = api.get(f"/v1/messages/{msg_id}/trace")
    return [e["type"] for e in answer.json()["events"]] if answer.status_code == 200 else []


@needs_chromium
def test_the_timeline_from_a_search_shows_each_step_and_each_groups_gap(admin: Admin) -> None:
    page, api = admin.page, admin.api
    assert api.put("/v1/topics/Traced", json={"write_queue_nums": 1}).status_code == 201
    receipt = send(api, "Traced", "order 1 paid", "order-1")
    pulled = api.get("/v1/groups/billing/topics/Traced/messages").json()
    commits = [{"topic": q["topic"], "queue_id": q["queue_id"], "offset": q["next_offset"]}
               for q in pulled["queues"]]  # fmt: skip
    assert api.post("/v1/groups/billing/offsets", json={"offsets": commits}).is_success
    received = api.post("/v1/groups/audit/topics/Traced/receive",
                        json={"max_messages": 1, "invisible_ms": 600_000})  # fmt: skip
    assert len(received.json()["messages"]) == 1
    wait_until(lambda: traced_types(api, receipt["msg_id"]) == ["stored", "delivered", "acked"])

    admin.goto("/admin/messages?mode=key&topic=Traced&key=order-1")
    page.locator("#result-table .trace-link").first.click()
    expect(page.locator("h1")).to_contain_text(receipt["uniq_key"])
    rows = page.locator("#timeline tbody tr")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-type") for i in range(3)] == [
        "stored", "delivered", "acked",
    ]  # fmt: skip
    gaps = [rows.nth(i).locator(".step-gap").inner_text() for i in range(1, 3)]
    assert all(STEP_GAP.match(gap) for gap in gaps), gaps
    expect(rows.nth(1)).to_contain_text("billing")
    expect(page.locator("#tracing")).to_have_text("on")
    billing = page.locator('#trace-groups tr[data-group="billing"]')
    expect(billing).to_contain_text("acked")
    audit = page.locator('#trace-groups tr[data-group="audit"]')
    expect(audit).to_contain_text("in flight")
    expect(audit.locator(".gap")).to_contain_text("not acked yet")
    assert layout_faults(page) == []
    admin.shot("message-trace")

    admin.goto("/admin/groups/audit/in-flight")
    page.locator("#in-flight .trace-link").first.click()
    expect(page.locator("h1")).to_contain_text(receipt["uniq_key"])


@needs_chromium
def test_a_dead_letters_trace_is_one_click_from_its_dlq_page(admin: Admin) -> None:
    page, api = admin.page, admin.api
    receipt = send(api, "Poison", "poison", "poison-1")
    moved = api.post("/v1/groups/cleanup/retry",
                     json={"msg_id": receipt["msg_id"], "delay_level": -1})  # fmt: skip
    assert moved.status_code == 200 and moved.json()["destination"] == "DLQ", moved.text
    admin.goto("/admin/dlq/cleanup")
    page.locator("#dlq-table .trace-link").first.click()
    expect(page.locator("h1")).to_contain_text(receipt["uniq_key"])
    expect(page.locator("#timeline tbody tr").first).to_have_attribute("data-type", "stored")
