"""The Transactions admin page in a real browser (Debian's Chromium through Playwright): each
open transaction shows what its half message holds (keys, tags, properties, the start of its
body), its state as a badge, and a rollback asks before it discards anything. Setup and checks
go through the /v1 HTTP API."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Dialog, expect

from tests.app.browser_support import Admin, layout_faults, needs_chromium
from tests.conftest import LiveServer, start_server, wait_until

pytestmark = needs_chromium

LONG_BODY = "<b>charge</b> card 4242\nfor order 9, " + "then ship it to the customer " * 10


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Checks far in the future: every transaction stays open until the test ends it."""
    live = start_server(
        tmp_path_factory.mktemp("store"),
        transaction_timeout_ms=600_000,
        transaction_check_interval_ms=600_000,
    )
    yield live
    live.stop()


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def half(api: httpx.Client, topic: str, group: str, **message: Any) -> dict[str, Any]:
    answer = api.post(
        f"/v1/topics/{topic}/transactions", json={"producer_group": group, "message": message}
    )
    assert answer.status_code == 201, answer.text
    sent: dict[str, Any] = answer.json()
    return sent


def state(api: httpx.Client, transaction_id: str) -> str:
    found: str = api.get(f"/v1/transactions/{transaction_id}").json()["state"]
    return found


def test_each_transaction_shows_its_half_message(admin: Admin) -> None:
    page, api, topic = admin.page, admin.api, name("Payments")
    group = name("payment_producers_of_the_eu_west_shop")
    text = half(
        api,
        topic,
        group,
        body=LONG_BODY,
        keys=["order-9", "customer-77"],
        tags="Charge",
        properties={"tenant": "acme", "region": "eu-west-1"},
    )
    binary = half(api, topic, group, body="AAECAwT/", body_encoding="base64", keys=["order-10"])

    page.set_viewport_size({"width": 1024, "height": 800})
    admin.goto("/admin/transactions")
    row = page.locator(f'#transactions tr[data-transaction="{text["transaction_id"]}"]')
    expect(row.locator(".producer-group")).to_have_text(group)
    expect(row.locator(".badge")).to_have_text("open")
    expect(row.locator(".fact.keys")).to_have_text("keys order-9 customer-77")
    expect(row.locator(".fact.tags")).to_have_text("tags Charge")
    expect(row.locator(".fact.property")).to_have_text(["region eu-west-1", "tenant acme"])
    expect(row.locator(".facts")).not_to_contain_text(
        "TRAN_MSG"
    )  # the broker's, not the producer's
    # Escaped, on one line, cut at a word's end with the whole size after it.
    preview = row.locator(".body-preview")
    size = len(LONG_BODY.encode())
    expect(preview).to_have_text(
        re.compile(rf"^<b>charge</b> card 4242 for order 9, then ship .*[a-z]… \({size} B\)$")
    )
    expect(preview.locator("b")).to_have_count(0)
    assert len(preview.inner_text()) < 160, "a preview, not the whole body"
    half_id = text["half"]["msg_id"]
    expect(row.get_by_role("link", name="the whole message")).to_have_attribute(
        "href", f"/admin/messages/{half_id}"
    )

    binary_row = page.locator(f'#transactions tr[data-transaction="{binary["transaction_id"]}"]')
    expect(binary_row.locator(".body-preview")).to_have_text("binary 6 B")
    assert layout_faults(page) == []
    admin.shot("transactions")


def test_a_rollback_asks_first_and_a_commit_delivers(admin: Admin) -> None:
    page, api, topic, group = admin.page, admin.api, name("Orders"), name("producers")
    kept = half(api, topic, group, body="order 1 paid", keys=["order-1"])
    dropped = half(api, topic, group, body="order 2 paid", keys=["order-2"])
    admin.goto("/admin/transactions")
    asked: list[str] = []

    def answer(dialog: Dialog, accept: bool) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    row = page.locator(f'#transactions tr[data-transaction="{dropped["transaction_id"]}"]')
    page.once("dialog", lambda dialog: answer(dialog, accept=False))
    row.get_by_role("button", name="Roll back").click()
    assert len(asked) == 1 and dropped["transaction_id"] in asked[0] and group in asked[0]
    assert state(api, dropped["transaction_id"]) == "open", "a dismissed question ends nothing"

    page.once("dialog", lambda dialog: answer(dialog, accept=True))
    row.get_by_role("button", name="Roll back").click()
    page.wait_for_url(re.compile(r"/admin/transactions\?ended="))
    expect(page.get_by_role("status")).to_contain_text(f"{dropped['transaction_id']} rolled back")
    assert state(api, dropped["transaction_id"]) == "rolled_back"

    kept_row = page.locator(f'#transactions tr[data-transaction="{kept["transaction_id"]}"]')
    kept_row.get_by_role("button", name="Commit").click()
    page.wait_for_url(re.compile(r"/admin/transactions\?ended=.*committed"))
    assert state(api, kept["transaction_id"]) == "committed"
    assert len(asked) == 2, "a commit does not ask"
    expect(page.locator("#transactions")).not_to_contain_text(kept["transaction_id"])


def test_a_transaction_given_up_says_so_with_a_badge(admin: Admin, tmp_path: Path) -> None:
    """Checked as often as the broker checks (once here) with no answer: it waits for an
    operator, marked "given up"."""
    fast = start_server(
        tmp_path / "store",
        transaction_timeout_ms=100,
        transaction_check_interval_ms=200,
        transaction_check_max=1,
    )
    try:
        api = fast.client()
        sent = half(api, name("Refunds"), "refunders", body="refund order 3")
        wait_until(lambda: state(api, sent["transaction_id"]) == "gave_up")
        response = admin.page.goto(f"{fast.url}/admin/transactions")
        assert response is not None and response.ok
        row = admin.page.locator(f'#transactions tr[data-transaction="{sent["transaction_id"]}"]')
        expect(row.locator(".badge.state-gave_up")).to_have_text("given up")
        expect(row.locator(".checks")).to_have_text("1")
    finally:
        fast.stop()
