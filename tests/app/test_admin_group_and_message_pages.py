"""Admin pages of a POP group and of a large message, in Chromium (see browser_support)."""

from __future__ import annotations

import datetime as dt
import re
import uuid

from playwright.sync_api import Page, expect

from tests.app.browser_support import Admin, needs_chromium

pytestmark = needs_chromium


def shown(ms: int) -> str:
    """A time as the pages print it (UTC); "never" for a queue never committed."""
    if not ms:
        return "never"
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def lag_rows_agree_with_the_api(admin: Admin, page: Page, group: str, topic: str) -> None:
    """The group page's row of every queue shows the API's in-flight count and last commit."""
    report = admin.api.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()
    [queues] = [t["queues"] for t in report["topics"]]
    assert queues, report
    for queue in queues:
        row = page.locator(f'.lag-table tr[data-queue="{queue["queue_id"]}"]')
        expect(row.locator("td.last-commit")).to_have_text(shown(queue["last_commit_timestamp"]))
        if queue["in_flight"]:
            expect(row.locator("td.in-flight")).to_have_text(str(queue["in_flight"]))


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
    # Per queue: what is in flight; nothing was acked, so no queue was ever committed.
    in_flight = page.locator(".lag-table td.in-flight")
    expect(in_flight).not_to_have_count(0)
    assert sum(int(n) for n in in_flight.all_inner_texts()) == 2
    expect(page.locator(".lag-table td.last-commit")).to_have_text(["never"] * in_flight.count())
    lag_rows_agree_with_the_api(admin, page, group, topic)
    mode.get_by_role("link", name="2 in flight").click()
    page.wait_for_url(re.compile(f"/admin/groups/{group}/in-flight$"))
    expect(page.locator("table tbody tr")).to_have_count(2)

    offsets_group = f"Pull_{uuid.uuid4().hex[:8]}"
    pulled = admin.api.get(f"/v1/groups/{offsets_group}/topics/{topic}/messages").json()
    commits = [{"topic": topic, "queue_id": q["queue_id"], "offset": q["next_offset"]}
               for q in pulled["queues"] if q["next_offset"]]  # fmt: skip
    assert len(commits) == 3  # 3 of the 8 queues hold a message; the pull pinned all 8
    assert admin.api.post(f"/v1/groups/{offsets_group}/offsets", json={"offsets": commits})
    admin.goto(f"/admin/groups/{offsets_group}")
    expect(page.locator("#consume-mode")).to_contain_text("pull and commit (offsets)")
    expect(page.locator(".lag-table td.in-flight")).to_have_count(0)  # not a POP group
    last_commits = page.locator(".lag-table td.last-commit").all_inner_texts()
    assert last_commits.count("never") == 8 - len(commits), last_commits
    lag_rows_agree_with_the_api(admin, page, offsets_group, topic)


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


def test_the_in_flight_page_is_paged_with_its_total(admin: Admin) -> None:
    page, topic, group = admin.page, f"Many_{uuid.uuid4().hex[:8]}", f"Pop_{uuid.uuid4().hex[:8]}"
    batch = {"messages": [{"body": f"job {n}"} for n in range(105)], "queue_id": 0}
    assert admin.api.post(f"/v1/topics/{topic}/messages", json=batch).status_code == 201
    taken = 0
    for _ in range(4):  # 32 a receive
        received = admin.api.post(
            f"/v1/groups/{group}/topics/{topic}/receive",
            json={"max_messages": 32, "invisible_ms": 600_000},
        )
        assert received.status_code == 200, received.text
        taken += len(received.json()["messages"])
    assert taken == 105
    admin.goto(f"/admin/groups/{group}/in-flight")
    rows = page.locator("#in-flight tbody tr")
    expect(rows).to_have_count(100)
    expect(page.locator("main")).to_contain_text("105 received and not acked")
    pager = page.locator("nav.pager")
    expect(pager).to_contain_text("1\N{EN DASH}100 of 105")
    pager.get_by_role("link", name="Next page").click()
    expect(rows).to_have_count(5)
    expect(rows.first.locator("td").nth(2)).to_have_text("100")
    expect(pager).to_contain_text("101\N{EN DASH}105 of 105")
    expect(pager.get_by_role("link", name="Next page")).to_have_count(0)
    pager.get_by_role("link", name="First page").click()
    expect(rows.first.locator("td").nth(2)).to_have_text("0")
    expect(pager.get_by_role("link", name="First page")).to_have_count(0)
