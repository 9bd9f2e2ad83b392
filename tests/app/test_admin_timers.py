"""The Timers admin page in a real browser (Debian's Chromium through Playwright): waiting
timer messages counted per topic and time bucket, the next ones listed soonest first with
when they are due (the receipt's ``deliver_at``) and what they hold, and a Cancel button that
asks first, then cancels through the timer service, as the DELETE route does. Setup and
checks go through the /v1 HTTP API."""

from __future__ import annotations

import datetime as dt
import re
import time
import uuid
from typing import Any

import httpx
from playwright.sync_api import Dialog, expect

from tests.app.browser_support import Admin, layout_faults, needs_chromium

pytestmark = needs_chromium

MINUTE_MS = 60_000


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def send_timed(
    api: httpx.Client, topic: str, after_ms: int, body: str, **fields: Any
) -> dict[str, Any]:
    body_json = {"body": body, "queue_id": 0, "deliver_after_ms": after_ms, **fields}
    response = api.post(f"/v1/topics/{topic}/messages", json=body_json)
    assert response.status_code == 201, response.text
    receipt: dict[str, Any] = response.json()["messages"][0]
    assert receipt["timer_handle"], receipt
    return receipt


def utc(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)


def shown(ms: int) -> str:
    """A time as the pages print it: ``2026-12-05 09:30:00.000`` (UTC)."""
    return utc(ms).strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


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

    page.on("dialog", lambda dialog: dialog.accept())  # "Cancel timer message …?"
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


def test_a_message_is_shown_due_at_the_deliver_at_of_its_receipt(admin: Admin) -> None:
    """Not at the start of its wheel slot: that is before its time, and it is never early."""
    page, api, topic = admin.page, admin.api, name("TimedAt")
    in_two_hours = utc(int(time.time() * 1000) + 2 * 3_600_000)
    on_the_minute = in_two_hours.replace(second=0, microsecond=0)  # a slot boundary
    odd = in_two_hours.replace(microsecond=250_000)  # inside a slot
    receipts = []
    for moment in (on_the_minute, odd):
        at = moment.isoformat().replace("+00:00", "Z")
        sent = api.post(f"/v1/topics/{topic}/messages", json={"body": "due", "deliver_at": at})
        assert sent.status_code == 201, sent.text
        receipts.append(sent.json()["messages"][0])

    admin.goto(f"/admin/timers?topic={topic}")
    for receipt in receipts:
        due = page.locator(f'#timer-next tr[data-uniq-key="{receipt["uniq_key"]}"] time.due')
        expect(due).to_have_text(shown(receipt["deliver_at"]))
        iso = utc(receipt["deliver_at"]).isoformat(timespec="milliseconds")
        expect(due).to_have_attribute("datetime", iso.replace("+00:00", "Z"))


def test_the_next_deliveries_show_what_a_cancel_would_drop_and_cancel_asks_first(
    admin: Admin,
) -> None:
    page, api, topic = admin.page, admin.api, name("TimedFacts")
    text = send_timed(
        api,
        topic,
        5 * MINUTE_MS,
        "<b>remind</b> customer 5\nabout invoice 5",
        keys=["invoice-5", "customer-5"],
        tags="Reminder",
        properties={"tenant": "acme"},
    )
    binary = send_timed(api, topic, 6 * MINUTE_MS, "AAEC/w==", body_encoding="base64")
    before = api.get("/v1/timers").json()

    admin.goto(f"/admin/timers?topic={topic}")
    row = page.locator(f'#timer-next tr[data-uniq-key="{text["uniq_key"]}"]')
    facts = row.locator("td.message .facts")
    expect(facts.locator(".fact.keys")).to_have_text("keys invoice-5 customer-5")
    expect(facts.locator(".fact.tags")).to_have_text("tags Reminder")
    expect(facts.locator('.fact.property[data-property="tenant"]')).to_have_text("tenant acme")
    expect(facts).not_to_contain_text("TIMER_")  # the broker's own properties stay out
    # The body as text on one line, escaped (no <b> element is made of it).
    expect(row.locator(".body-preview")).to_have_text("<b>remind</b> customer 5 about invoice 5")
    expect(row.locator(".body-preview b")).to_have_count(0)
    binary_row = page.locator(f'#timer-next tr[data-uniq-key="{binary["uniq_key"]}"]')
    expect(binary_row.locator(".body-preview")).to_have_text("binary 4 B")
    page.set_viewport_size({"width": 1024, "height": 800})
    assert layout_faults(page) == []

    asked: list[str] = []

    def answer(dialog: Dialog, accept: bool) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", lambda dialog: answer(dialog, accept=False))
    row.get_by_role("button", name="Cancel").click()
    assert asked and text["uniq_key"] in asked[0] and topic in asked[0], asked
    assert api.get("/v1/timers").json()["cancels_accepted"] == before["cancels_accepted"]
    page.reload()
    expect(row).to_be_visible()  # a dismissed question cancels nothing

    cancelled = api.delete(f"/v1/topics/{topic}/timers/{binary['timer_handle']}")
    assert cancelled.json()["outcome"] == "cancelled"
    page.once("dialog", lambda dialog: answer(dialog, accept=True))
    row.get_by_role("button", name="Cancel").click()
    page.wait_for_url(re.compile(r"/admin/timers\?cancelled="))
    expect(page.get_by_role("status")).to_contain_text(f"{text['uniq_key']} of {topic} cancelled")
    again = api.delete(f"/v1/topics/{topic}/timers/{text['timer_handle']}")
    assert again.json()["outcome"] == "already_cancelled", "the page cancelled it for real"

    # Two cancels answered: the status counts them now, not only when their time comes.
    after = api.get("/v1/timers").json()
    assert after["cancels_accepted"] - before["cancels_accepted"] == 2
    expect(page.locator("#timers-cancels-accepted")).to_have_text(str(after["cancels_accepted"]))
