"""The Timers admin page in a real browser (Debian's Chromium through Playwright): waiting
timer messages counted per topic and time bucket, the next ones listed soonest first, and a
Cancel button that cancels through the timer service, as the DELETE route does. Setup and
checks go through the /v1 HTTP API."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
from playwright.sync_api import expect

from tests.app.browser_support import Admin, needs_chromium

pytestmark = needs_chromium

MINUTE_MS = 60_000


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def send_timed(api: httpx.Client, topic: str, after_ms: int, body: str) -> dict[str, Any]:
    body_json = {"body": body, "queue_id": 0, "deliver_after_ms": after_ms}
    response = api.post(f"/v1/topics/{topic}/messages", json=body_json)
    assert response.status_code == 201, response.text
    receipt: dict[str, Any] = response.json()["messages"][0]
    assert receipt["timer_handle"], receipt
    return receipt


def test_timers_page_counts_lists_and_cancels_through_the_service(admin: Admin) -> None:
    page, api = admin.page, admin.api
    soon, later = name("TimedSoon"), name("TimedLater")
    for topic in (soon, later):
        body = {"read_queue_nums": 1, "write_queue_nums": 1}
        assert api.put(f"/v1/topics/{topic}", json=body).status_code == 201
    first = send_timed(api, soon, 5 * MINUTE_MS, "first")
    second = send_timed(api, soon, 30 * MINUTE_MS, "second")
    far = send_timed(api, later, 2 * 86_400_000 + MINUTE_MS, "far")  # beyond the roll window

    admin.goto("/admin/timers")
    counts = page.locator("#timer-counts tbody tr")
    soon_row = counts.filter(has_text=soon)
    # within 1 min | 1-10 min | 10 min-1 h | 1 h-1 day | later | total
    expect(soon_row.locator("td.num")).to_have_text(["0", "1", "1", "0", "0", "2"])
    later_row = counts.filter(has_text=later)
    expect(later_row.locator("td.num")).to_have_text(["0", "0", "0", "0", "1", "1"])

    mine = page.locator("#timer-next tbody tr").filter(has_text=re.compile(f"{soon}|{later}"))
    expect(mine).to_have_count(3)
    keys = mine.locator("td.uniq").all_inner_texts()
    assert keys == [first["uniq_key"], second["uniq_key"], far["uniq_key"]], "soonest first"
    admin.shot("timers")

    mine.filter(has_text=first["uniq_key"]).get_by_role("button", name="Cancel").click()
    page.wait_for_url(re.compile(r"/admin/timers\?cancelled="))
    expect(page.get_by_role("status")).to_contain_text(f"{first['uniq_key']} of {soon} cancelled")
    expect(counts.filter(has_text=soon).locator("td.num")).to_have_text(
        ["0", "0", "1", "0", "0", "1"]
    )
    expect(page.locator("#timer-next")).not_to_contain_text(first["uniq_key"])

    again = api.delete(f"/v1/topics/{soon}/timers/{first['timer_handle']}")
    assert again.status_code == 200, again.text
    assert again.json()["outcome"] == "already_cancelled", "the page cancelled it for real"

    admin.goto(f"/admin/timers?topic={later}")
    expect(page.locator("#timer-counts tbody tr")).to_have_count(1)
    expect(page.locator("#timer-next tbody tr td.uniq")).to_have_text([far["uniq_key"]])


def test_a_wrong_handle_shows_the_api_error(admin: Admin) -> None:
    topic = name("TimedBad")
    admin.goto("/admin/timers")
    csrf = admin.page.locator("input[name=csrf_token]").first
    token = csrf.get_attribute("value") if csrf.count() else None
    response = admin.page.request.post(
        f"{admin.live.url}/admin/timers/{topic}/not-a-handle/cancel",
        form={"csrf_token": token or ""},
    )
    assert response.status == 400
    assert "Invalid timer handle" in response.text()
