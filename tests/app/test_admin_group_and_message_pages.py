"""Admin pages of a POP group and of a large message, in Chromium (see browser_support)."""

from __future__ import annotations

import re
import uuid

from playwright.sync_api import expect

from tests.app.browser_support import Admin, needs_chromium

pytestmark = needs_chromium


def test_a_pop_group_page_says_so_and_links_its_messages_in_flight(admin: Admin) -> None:
    page, topic, group = admin.page, f"Work_{uuid.uuid4().hex[:8]}", f"Pop_{uuid.uuid4().hex[:8]}"
    for i in range(3):
        sent = admin.api.post(f"/v1/topics/{topic}/messages", json={"body": f"job {i}"})
        assert sent.status_code == 201
    received = admin.api.post(
        f"/v1/groups/{group}/topics/{topic}/receive",
        json={"max_messages": 2, "invisible_ms": 60_000},
    )
    assert len(received.json()["messages"]) == 2
    admin.goto(f"/admin/groups/{group}")
    mode = page.locator("#consume-mode")
    expect(mode).to_contain_text("receive/ack (POP")
    mode.get_by_role("link", name="2 in flight").click()
    page.wait_for_url(re.compile(f"/admin/groups/{group}/in-flight$"))
    expect(page.locator("table tbody tr")).to_have_count(2)

    offsets_group = f"Pull_{uuid.uuid4().hex[:8]}"
    pulled = admin.api.get(f"/v1/groups/{offsets_group}/topics/{topic}/messages").json()
    commits = [{"topic": topic, "queue_id": q["queue_id"], "offset": q["next_offset"]}
               for q in pulled["queues"]]  # fmt: skip
    assert admin.api.post(f"/v1/groups/{offsets_group}/offsets", json={"offsets": commits})
    admin.goto(f"/admin/groups/{offsets_group}")
    expect(page.locator("#consume-mode")).to_contain_text("pull and commit (offsets)")


def test_a_large_body_is_cut_on_the_page_and_downloads_whole(admin: Admin) -> None:
    page, topic = admin.page, f"Big_{uuid.uuid4().hex[:8]}"
    body = ("0123456789abcdef" * (256 * 1024))[: 4 * 1024 * 1024 - 64]  # about 4 MiB of text
    sent = admin.api.post(
        f"/v1/topics/{topic}/messages",
        params={"queue_id": 0},
        content=body.encode(),
        headers={"content-type": "text/plain"},
    )
    assert sent.status_code == 201, sent.text
    msg_id = sent.json()["messages"][0]["msg_id"]
    html = admin.api.get(f"/admin/messages/{msg_id}")
    assert html.status_code == 200 and len(html.content) < 256 * 1024, len(html.content)
    admin.goto(f"/admin/messages/{msg_id}")
    expect(page.locator("#body-cut")).to_contain_text("The first 64 KiB of 4,194,240 bytes")
    with page.expect_download() as download:
        page.locator("#download-body").click()
    path = download.value.path()
    assert path is not None and path.read_bytes() == body.encode()
    page.get_by_role("link", name="Hex").click()
    expect(page.locator("#body-cut")).to_contain_text("download the whole body")
