"""The admin pages in a real browser: Debian's Chromium driven by Playwright (a module-scoped
``sync_playwright``, not pytest-playwright's fixtures) against a live server on 127.0.0.1.
Setup and checks go through the /v1 HTTP API, so every number a page shows is compared with
what the API says.

The browser comes from ``tests/app/browser_support.py``: a request to anything but the loopback
address, or a JavaScript error, fails the test. A screenshot of each page at
1280x800 and 390x844 is kept in ``test-artifacts/admin/``.
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.app.browser_support import Admin, layout_faults, needs_chromium
from tests.conftest import LiveServer

pytestmark = needs_chromium


def name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


# ==================================================================== /v1 helpers


def put_topic(api: httpx.Client, topic: str, queues: int) -> None:
    body = {"read_queue_nums": queues, "write_queue_nums": queues}
    assert api.put(f"/v1/topics/{topic}", json=body).status_code == 201


def send(api: httpx.Client, topic: str, queue_id: int, **fields: Any) -> dict[str, Any]:
    body = {"body": fields.pop("body", "payload"), "queue_id": queue_id, **fields}
    response = api.post(f"/v1/topics/{topic}/messages", json=body)
    assert response.status_code == 201, response.text
    receipt: dict[str, Any] = response.json()["messages"][0]
    return receipt


def pull_and_commit(api: httpx.Client, group: str, topic: str) -> int:
    """One group pull, then a commit of every queue's next offset; returns messages pulled."""
    pulled = api.get(f"/v1/groups/{group}/topics/{topic}/messages", params={"max_messages": 64})
    assert pulled.status_code == 200, pulled.text
    answer = pulled.json()
    offsets = [
        {"topic": q.get("topic") or topic, "queue_id": q["queue_id"], "offset": q["next_offset"]}
        for q in answer["queues"]
    ]
    committed = api.post(f"/v1/groups/{group}/offsets", json={"offsets": offsets})
    assert committed.status_code == 200, committed.text
    return len(answer["messages"])


def committed_offsets(api: httpx.Client, group: str, topic: str) -> dict[int, int]:
    report = api.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()
    return {q["queue_id"]: q["committed_offset"] for t in report["topics"] for q in t["queues"]}


def total_lag(api: httpx.Client, group: str) -> int:
    lag: int = api.get(f"/v1/groups/{group}/offsets").json()["total_lag"]
    return lag


# ==================================================================== topics and messages


def test_create_topic_send_find_by_key_and_open_detail(admin: Admin) -> None:
    page, topic, key = admin.page, name("Admin"), name("order")
    admin.goto("/admin/topics")
    form = page.locator("#create-topic")
    form.get_by_label("Name").fill(topic)
    form.get_by_label("Read queues").fill("2")
    form.get_by_label("Write queues").fill("2")
    form.get_by_role("button", name="Create topic").click()
    page.wait_for_url(re.compile(rf"/admin/topics/{topic}\?created=1$"))
    expect(page.get_by_role("status")).to_contain_text(f"Topic {topic} created")
    expect(page.locator("#queue-table tbody tr")).to_have_count(2)
    assert admin.api.get(f"/v1/topics/{topic}").json()["read_queue_nums"] == 2

    send_form = page.locator("#send-form")
    send_form.get_by_label("Body").fill("hello from a browser")
    send_form.get_by_label("Tags").fill("TagA")
    send_form.get_by_label("Keys").fill(key)
    send_form.get_by_role("button", name="Send").click()
    receipt = page.locator("#sent-receipt")
    expect(receipt).to_be_visible()
    msg_id = receipt.locator("a.msgid").inner_text()
    # The queue table refreshes itself after the send.
    expect(page.locator("#queue-table")).to_contain_text("1")
    admin.shot("topic")

    admin.goto("/admin/messages?mode=key")
    search = page.locator("#search-form")
    search.get_by_label("Topic").fill(topic)
    search.get_by_label("Key").fill(key)
    search.get_by_role("button", name="Search").click()
    row = page.locator("#result-table tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("hello from a browser")
    admin.shot("messages")
    row.get_by_role("link", name=msg_id).click()

    page.wait_for_url(re.compile(f"/admin/messages/{msg_id}$"))
    expect(page.locator("h1")).to_have_text(msg_id)
    expect(page.locator("#properties")).to_contain_text("TagA")
    expect(page.locator("#properties")).to_contain_text(key)
    expect(page.locator("#reconsume")).to_have_text("0")
    expect(page.locator("pre.body")).to_have_text("hello from a browser")
    page.get_by_role("link", name="Hex").click()
    expect(page.locator("pre.body.hex")).to_contain_text("68 65 6c 6c 6f")  # "hello"
    admin.shot("message")


def test_the_topic_list_is_paged_with_its_total(admin: Admin) -> None:
    page, prefix = admin.page, name("Paged")
    for n in range(105):
        put_topic(admin.api, f"{prefix}-{n:03d}", 1)
    admin.goto(f"/admin/topics?q={prefix}")
    rows = page.locator("#topic-list tbody tr")
    expect(rows).to_have_count(100)
    pager = page.locator("#topic-list nav.pager")
    expect(pager).to_contain_text("1\N{EN DASH}100 of 105")
    expect(page.locator("#topic-list")).to_contain_text("105 topics matching")
    pager.get_by_role("link", name="Next page").click()
    expect(rows).to_have_count(5)
    expect(rows.first).to_contain_text(f"{prefix}-100")
    expect(pager).to_contain_text("101\N{EN DASH}105 of 105")
    expect(pager.get_by_role("link", name="Next page")).to_have_count(0)
    pager.get_by_role("link", name="First page").click()
    expect(rows.first).to_contain_text(f"{prefix}-000")
    expect(pager.get_by_role("link", name="First page")).to_have_count(0)


def test_message_search_by_time_offset_and_id_and_consumption(admin: Admin) -> None:
    page, topic, group = admin.page, name("Find"), name("Reader")
    put_topic(admin.api, topic, 2)
    first = send(admin.api, topic, 1, body="first", keys=["k1"])
    send(admin.api, topic, 1, body="second")
    pull_and_commit(admin.api, group, topic)  # the group has now consumed both
    third = send(admin.api, topic, 1, body="third")

    admin.goto(f"/admin/messages?mode=time&topic={topic}")
    expect(page.locator("#result-table tbody tr")).to_have_count(3)
    admin.goto(f"/admin/messages?mode=offset&topic={topic}&queue_id=1&offset=1")
    rows = page.locator("#result-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("second")

    admin.goto("/admin/messages?mode=id")
    page.get_by_label("Message id").fill(first["msg_id"])
    page.get_by_role("button", name="Open").click()
    page.wait_for_url(re.compile(f"/admin/messages/{first['msg_id']}$"))
    expect(page.locator(f'#consumption li[data-group="{group}"]')).to_contain_text("consumed")
    admin.goto(f"/admin/messages/{third['msg_id']}")
    expect(page.locator(f'#consumption li[data-group="{group}"]')).to_contain_text("not yet")

    admin.goto("/admin/messages?mode=id")
    page.get_by_label("Message id").fill("F" * 31 + "X")
    page.get_by_role("button", name="Open").click()
    expect(page.locator("#results [role=alert]")).to_contain_text("32 or 56 hex characters")


def stored(api: httpx.Client, topic: str, queues: int) -> list[dict[str, Any]]:
    """Every message of ``topic``, in a time range's order: store time, queue, offset."""
    found = []
    for queue_id in range(queues):
        url = f"/v1/topics/{topic}/queues/{queue_id}/messages"
        found += api.get(url, params={"offset": 0, "max_messages": 32}).json()["messages"]
    return sorted(found, key=lambda m: (m["store_timestamp"], m["queue_id"], m["queue_offset"]))


def walk_result_pages(page: Page) -> list[list[str]]:
    """The bodies of every page of a search, following its "Next page" links."""
    pages = []
    while True:
        expect(page.locator("#result-table")).to_be_visible()
        pages.append(page.locator("#result-table td.preview").all_inner_texts())
        following = page.locator("#results nav.pager").get_by_role("link", name="Next page")
        if following.count() == 0:
            return pages
        expect(page.locator("#result-count")).to_contain_text("there are more on the next page")
        following.click()
        expect(page.locator("#result-table td.preview").first).not_to_have_text(pages[-1][0])


def test_a_search_with_more_results_pages_on_by_its_next_page_link(admin: Admin) -> None:
    page, api, topic = admin.page, admin.api, name("Paging")
    put_topic(api, topic, 2)
    # A batch per queue: a batch's messages share a store time, so pages end inside a run of
    # equal times, and the two queues interleave.
    for round_ in range(2):
        for queue_id in (0, 1):
            bodies = [f"r{round_} q{queue_id} m{i}" for i in range(3)]
            batch = {"messages": [{"body": b, "keys": ["same"]} for b in bodies]}
            sent = api.post(f"/v1/topics/{topic}/messages", json={**batch, "queue_id": queue_id})
            assert sent.status_code == 201, sent.text
    in_order = [m["body"] for m in stored(api, topic, 2)]
    assert len(in_order) == 12

    admin.goto(f"/admin/messages?mode=time&topic={topic}&limit=5")
    pages = walk_result_pages(page)
    assert [len(p) for p in pages] == [5, 5, 2]
    assert [body for p in pages for body in p] == in_order, "each message once, in order"
    page.locator("#results nav.pager").get_by_role("link", name="First page").click()  # back
    expect(page.locator("#result-table td.preview")).to_have_text(in_order[:5])

    admin.goto(f"/admin/messages?mode=offset&topic={topic}&queue_id=1&offset=1&limit=2")
    queue_1 = [body for body in in_order if " q1 " in body]
    assert walk_result_pages(page) == [queue_1[1:3], queue_1[3:5], queue_1[5:]]

    # By key: the newest matches first; the next pages hold older ones.
    admin.goto(f"/admin/messages?mode=key&topic={topic}&key=same&limit=5")
    expect(page.locator("#result-count")).to_contain_text("older ones")
    pages = walk_result_pages(page)
    assert pages == [in_order[7:], in_order[2:7], in_order[:2]]
    admin.shot("messages-paged")


def test_a_search_with_a_filter_shows_only_the_matching_messages(admin: Admin) -> None:
    page, api, topic = admin.page, admin.api, name("Filtered")
    put_topic(api, topic, 1)
    for i, region in enumerate(["eu", "us", "eu", "ap"]):
        send(api, topic, 0, body=f"order {i}", properties={"region": region})
    admin.goto(f"/admin/messages?mode=offset&topic={topic}&queue_id=0&offset=0")
    form = page.locator("#search-form")
    form.get_by_label("Filter").fill("region = 'eu'")
    form.get_by_role("button", name="Search").click()
    expect(page.locator("#result-table td.preview")).to_have_text(["order 0", "order 2"])
    expect(page.get_by_text("2 of the 4 messages searched match the filter")).to_be_visible()
    form.get_by_label("Filter").fill("region LIKE 'e%'")
    form.get_by_role("button", name="Search").click()
    expect(page.get_by_text("there is no LIKE", exact=False)).to_be_visible()
    admin.shot("messages-filtered")


def test_topic_edit_and_errors_show_the_api_text(admin: Admin) -> None:
    page, topic = admin.page, name("Edit")
    put_topic(admin.api, topic, 2)
    admin.goto(f"/admin/topics/{topic}")
    settings = page.locator("#config-form")
    settings.get_by_label("Write queues").fill("3")
    settings.get_by_label("Permission").select_option("4")
    settings.get_by_role("button", name="Save").click()
    expect(page.locator("#config-result")).to_contain_text("3 write queues, perm 4")
    expect(page.locator("#queue-table tbody tr")).to_have_count(3)
    detail = admin.api.get(f"/v1/topics/{topic}").json()
    assert (detail["write_queue_nums"], detail["perm"]) == (3, 4)

    page.locator("#send-form").get_by_role("button", name="Send").click()
    alert = page.locator("#send-result [role=alert]")
    expect(alert).to_contain_text("Topic is not writeable")
    expect(alert).to_contain_text(f"topic '{topic}' is not writeable")
    expect(alert.locator(".code")).to_have_text("TOPIC_NOT_WRITEABLE")

    admin.goto("/admin/topics")
    create = page.locator("#create-topic")
    create.get_by_label("Name").fill(topic)
    create.get_by_role("button", name="Create topic").click()
    expect(page.locator("#create-result")).to_contain_text("already exists")

    page.get_by_label("Search").fill(topic)
    expect(page.locator("#topic-list tbody tr")).to_have_count(1)
    page.get_by_label("Search").fill("")
    page.get_by_label("Kind").select_option("system")
    expect(page.locator("#topic-list tbody tr")).to_have_count(1)
    expect(page.locator("#topic-list tbody tr")).to_contain_text("SCHEDULE_TOPIC_XXXX")


# ==================================================================== groups


def test_group_lag_shows_and_drops_after_pull_and_commit(admin: Admin) -> None:
    page, topic, group = admin.page, name("Lag"), name("Slow")
    put_topic(admin.api, topic, 2)
    assert pull_and_commit(admin.api, group, topic) == 0  # the group starts at offset 0
    for i in range(5):
        send(admin.api, topic, i % 2, body=f"m{i}")
    assert total_lag(admin.api, group) == 5

    admin.goto(f"/admin/groups?q={group}")
    row = page.locator(f'#group-list tr[data-group="{group}"]')
    expect(row.locator("td.lag")).to_have_text("5")
    row.get_by_role("link", name=group).click()
    expect(page.locator("#total-lag")).to_have_text("5")
    expect(page.locator("#lag-seconds")).to_have_text(re.compile(r"^\d+ s$"))
    expect(page.locator(".lag-table tbody tr")).to_have_count(2)
    expect(page.locator(".chart[data-chart-ready=true] canvas")).to_have_count(1)

    assert pull_and_commit(admin.api, group, topic) == 5
    page.reload()
    expect(page.locator("#total-lag")).to_have_text("0")
    expect(page.locator("#lag-seconds")).to_have_text("0 s")
    assert total_lag(admin.api, group) == 0


def preview_numbers(page: Page) -> dict[int, tuple[str, str, str, str]]:
    numbers = {}
    for row in page.locator("#reset-preview .reset-table tbody tr").all():
        cells = [row.locator(f"td.{c}").inner_text() for c in ("current", "target", "skipped")]
        cells.append(row.locator("td.redelivered").inner_text())
        numbers[int(row.get_attribute("data-queue") or -1)] = (
            cells[0],
            cells[1],
            cells[2],
            cells[3],
        )
    return numbers


def test_reset_preview_shows_what_the_reset_then_applies(admin: Admin) -> None:
    page, topic, group = admin.page, name("Reset"), name("Replay")
    put_topic(admin.api, topic, 2)
    pull_and_commit(admin.api, group, topic)
    for i in range(6):
        send(admin.api, topic, i % 2)
    pull_and_commit(admin.api, group, topic)
    assert committed_offsets(admin.api, group, topic) == {0: 3, 1: 3}

    admin.goto(f"/admin/groups/{group}")
    form = page.locator("#reset-form")
    form.get_by_label("Topic").select_option(topic)
    form.get_by_label("Move to").select_option("earliest")
    form.get_by_role("button", name="Preview reset").click()
    expect(page.locator("#total-redelivered")).to_have_text("6")
    previewed = preview_numbers(page)
    assert previewed == {0: ("3", "0", "0", "3"), 1: ("3", "0", "0", "3")}
    admin.shot("group-reset-preview")
    assert committed_offsets(admin.api, group, topic) == {0: 3, 1: 3}  # a preview moves nothing

    # By time: before the first message is the same as earliest.
    form.get_by_label("Move to").select_option("timestamp")
    form.get_by_label("Time (UTC)").fill("2000-01-01T00:00:00")
    form.get_by_role("button", name="Preview reset").click()
    expect(page.locator("#reset-preview h3")).to_contain_text("2000-01-01 00:00:00.000")
    assert preview_numbers(page) == previewed
    page.get_by_role("button", name="Apply this reset").click()
    expect(page.locator("#reset-applied")).to_contain_text("Reset applied")
    applied = committed_offsets(admin.api, group, topic)
    assert applied == {q: int(numbers[1]) for q, numbers in previewed.items()}
    expect(page.locator("#total-lag")).to_have_text("6")  # the lag table refreshed itself

    # A preview that went stale (a message arrived) is not applied blindly.
    form.get_by_label("Move to").select_option("latest")
    form.get_by_role("button", name="Preview reset").click()
    expect(page.locator("#total-skipped")).to_have_text("6")
    send(admin.api, topic, 0)
    page.get_by_role("button", name="Apply this reset").click()
    expect(page.locator("#reset-preview [role=alert]")).to_contain_text("moved since the preview")
    expect(page.locator("#total-skipped")).to_have_text("7")
    assert committed_offsets(admin.api, group, topic) == {0: 0, 1: 0}
    page.get_by_role("button", name="Apply this reset").click()
    expect(page.locator("#reset-applied")).to_contain_text("7 skipped")
    assert committed_offsets(admin.api, group, topic) == {0: 4, 1: 3}


# ==================================================================== DLQ


def make_dead_letters(api: httpx.Client, group: str, topic: str, count: int) -> list[str]:
    """Send ``count`` messages and send each one back straight to the group's DLQ."""
    dead = []
    for i in range(count):
        receipt = send(api, topic, 0, body=f"poison {i}", tags="Bad" if i else "Worse")
        answer = api.post(
            f"/v1/groups/{group}/retry", json={"msg_id": receipt["msg_id"], "delay_level": -1}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["destination"] == "DLQ"
        dead.append(answer.json()["msg_id"])
    return dead


def test_dlq_redrive_shows_each_message_outcome(admin: Admin) -> None:
    page, topic, group = admin.page, name("Pay"), name("Payer")
    put_topic(admin.api, topic, 1)
    dead = make_dead_letters(admin.api, group, topic, 3)

    admin.goto("/admin/dlq")
    page.get_by_role("link", name=group).click()
    rows = page.locator("#dlq-table tbody tr")
    expect(rows).to_have_count(3)
    # What each dead letter is: its body, tags and keys, next to the box that selects it.
    expect(rows.locator(".body-preview")).to_have_text(["poison 0", "poison 1", "poison 2"])
    expect(rows.locator(".fact.tags")).to_have_text(["tags Worse", "tags Bad", "tags Bad"])
    page.get_by_label("Page size").fill("2")
    page.get_by_role("button", name="Apply filter").click()
    expect(rows).to_have_count(2)
    page.get_by_role("link", name="Next page").click()
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text(dead[2])
    page.get_by_role("link", name="First page").click()
    expect(rows).to_have_count(2)
    page.get_by_label("Page size").fill("50")
    page.get_by_role("button", name="Apply filter").click()
    expect(rows).to_have_count(3)
    page.on("dialog", lambda dialog: dialog.accept())  # "Send the chosen dead letters back now?"
    page.get_by_role("button", name="Redrive", exact=True).click()  # nothing ticked
    expect(page.locator("#redrive-result [role=alert]")).to_contain_text("select at least one")

    for msg_id in dead[:2]:
        page.get_by_label(f"Select {msg_id}").check()
    page.get_by_role("button", name="Preview redrive").click()
    outcomes = page.locator("#outcomes tbody tr")
    expect(outcomes).to_have_count(2)
    expect(outcomes.locator(".badge")).to_have_text(["would be redriven"] * 2)
    expect(page.locator("#redrive-report [role=status] .badge")).to_have_text("2 would be redriven")
    assert admin.api.get(f"/v1/topics/{topic}").json()["queues"][0]["max_offset"] == 3

    page.get_by_role("button", name="Redrive", exact=True).click()
    expect(page.locator("#redrive-report")).to_have_attribute("data-dry-run", "false")
    expect(outcomes.locator(".badge")).to_have_text(["redriven", "redriven"])
    for msg_id in dead[:2]:
        moved = page.locator(f'#outcomes tr[data-msg-id="{msg_id}"]')
        expect(moved).to_contain_text(topic)
        new_id = moved.locator("td").nth(3).inner_text()
        assert admin.api.get(f"/v1/messages/{new_id}").json()["topic"] == topic
        # The list refreshed itself: the dead letter now says where it went.
        expect(page.locator(f'#dlq-table tr[data-msg-id="{msg_id}"]')).to_contain_text(new_id)
    # The depth fell: 1 still waits, 2 were redriven (and stay listed, marked).
    expect(page.locator("#dlq-depth")).to_contain_text("1 waiting, 2 redriven")
    admin.shot("dlq-redrive")
    admin.goto("/admin/dlq")
    expect(page.locator(f'tr:has(a:text-is("{group}")) td.waiting')).to_have_text("1")
    admin.goto(f"/admin/groups?q={group}")
    expect(page.locator(f'tr[data-group="{group}"] td:nth-child(5)')).to_have_text("1")
    admin.page.go_back()
    admin.page.go_back()

    # Everything matching tag "Bad": one was moved already, one is new.
    page.get_by_label("Tags").fill("Bad")
    page.get_by_role("button", name="Apply filter").click()
    expect(rows).to_have_count(2)
    page.get_by_label("every message matching the filter").check()
    page.get_by_role("button", name="Preview redrive").click()
    expect(outcomes).to_have_count(2)
    expect(page.locator(f'#outcomes tr[data-msg-id="{dead[1]}"] .badge')).to_have_text(
        "already redriven"
    )
    expect(page.locator(f'#outcomes tr[data-msg-id="{dead[2]}"] .badge')).to_have_text(
        "would be redriven"
    )


# ==================================================================== every page, two sizes


@pytest.fixture(scope="module")
def seeded(live_server: LiveServer) -> dict[str, str]:
    """A topic with traffic, a lagging group and a dead letter, for the layout checks."""
    api = live_server.client()
    topic, group = name("Shop_orders_with_a_rather_long_topic_name"), name("Billing")
    put_topic(api, topic, 4)
    pull_and_commit(api, group, topic)
    receipts = [send(api, topic, i % 4, keys=[f"key-{i}"], tags="T") for i in range(8)]
    pull_and_commit(api, group, topic)
    for i in range(4):
        send(api, topic, i)
    make_dead_letters(api, group, topic, 1)
    return {
        "topic": topic,
        "group": group,
        "msg_id": receipts[0]["msg_id"],
        "dlq_topic": f"%DLQ%{group}",
    }


PAGES = [
    pytest.param("overview", "/admin/", id="overview"),
    pytest.param("topics", "/admin/topics", id="topics"),
    pytest.param("topic", "/admin/topics/{topic}", id="topic"),
    pytest.param("groups", "/admin/groups", id="groups"),
    pytest.param("group", "/admin/groups/{group}", id="group"),
    pytest.param("messages", "/admin/messages?mode=time&topic={topic}", id="messages"),
    pytest.param("message", "/admin/messages/{msg_id}", id="message"),
    pytest.param("dlqs", "/admin/dlq", id="dlqs"),
    pytest.param("dlq", "/admin/dlq/{group}", id="dlq"),
    pytest.param("dlq-topic", "/admin/topics/{dlq_topic}", id="dlq-topic"),
    pytest.param("timers", "/admin/timers", id="timers"),
]


@pytest.mark.parametrize(
    "size",
    [pytest.param((1280, 800), id="desktop"), pytest.param((390, 844), id="phone")],
)
def test_every_page_fits_without_horizontal_overflow(
    admin: Admin, seeded: dict[str, str], size: tuple[int, int]
) -> None:
    page = admin.page
    page.set_viewport_size({"width": size[0], "height": size[1]})
    values = {key: quote(value, safe="") for key, value in seeded.items()}
    for label, path in (p.values for p in PAGES):
        admin.goto(str(path).format(**values))
        expect(page.locator("main h1")).to_be_visible()
        for chart in page.locator(".chart").all():
            expect(chart.locator("canvas")).to_have_count(1)
        overflow = page.evaluate(
            """() => {
                const main = document.querySelector("main");
                return {
                    page: document.documentElement.scrollWidth - window.innerWidth,
                    main: main.scrollWidth - main.clientWidth,
                };
            }"""
        )
        admin.shot(str(label))
        assert overflow == {"page": 0, "main": 0}, f"{label} overflows: {overflow}"


@pytest.fixture(scope="module")
def decisions(live_server: LiveServer, seeded: dict[str, str]) -> dict[str, str]:
    """What the pages that ask for a decision list, with long names, keys and bodies: dead
    letters (one redriven), open transactions, timer messages, a POP group in flight."""
    api = live_server.client()
    topic, group = seeded["topic"], name("Redriving_group_with_a_long_name")
    long_keys = ["order-1234567890-eu-west", "customer-0987654321"]
    properties = {"tenant": "acme-industries-international", "region": "eu-west-1"}
    body = "payment refused: " + "card declined by the issuing bank " * 6
    for i in range(3):
        receipt = send(api, topic, 0, body=f"{body} #{i}", keys=long_keys, properties=properties)
        back = {"msg_id": receipt["msg_id"], "delay_level": -1}
        assert api.post(f"/v1/groups/{group}/retry", json=back).status_code == 200
    redrive = api.post(f"/v1/groups/{group}/dlq/redrive", json={"limit": 1})
    assert redrive.json()["summary"]["moved"] == 1, redrive.text
    producers = name("payment_producers_of_the_eu_west_shop")
    for message in (
        {"body": body, "keys": long_keys, "tags": "Charge", "properties": properties},
        {"body": "AAECAwT/", "body_encoding": "base64", "keys": ["order-10"]},
    ):
        half = {"producer_group": producers, "message": message}
        assert api.post(f"/v1/topics/{topic}/transactions", json=half).status_code == 201
    for minutes in (5, 50):
        timed = {"body": body, "keys": long_keys, "properties": properties}
        sent = api.post(
            f"/v1/topics/{topic}/messages", json={**timed, "deliver_after_ms": minutes * 60_000}
        )
        assert sent.status_code == 201, sent.text
    pop_group = name("Pop_workers")
    receive = {"max_messages": 3, "invisible_ms": 600_000}
    assert api.post(f"/v1/groups/{pop_group}/topics/{topic}/receive", json=receive).is_success
    return {"dlq_group": group, "pop_group": pop_group}


def test_every_page_fits_its_boxes_at_1024_px_and_ids_stay_whole(
    admin: Admin, seeded: dict[str, str], decisions: dict[str, str]
) -> None:
    page = admin.page
    page.set_viewport_size({"width": 1024, "height": 800})
    values = {key: quote(value, safe="") for key, value in {**seeded, **decisions}.items()}
    paths = [str(p.values[1]) for p in PAGES] + [
        "/admin/dlq/{dlq_group}",
        "/admin/transactions",
        "/admin/groups/{pop_group}",
        "/admin/messages?mode=time&topic={topic}&limit=3",
        "/admin/messages?mode=key&topic={topic}&key=key-1",
    ]
    for path in paths:
        admin.goto(path.format(**values))
        expect(page.locator("main h1")).to_be_visible()
        assert layout_faults(page) == [], path
    admin.goto(f"/admin/dlq/{values['dlq_group']}")
    page.get_by_label("Select all on this page").check()
    page.get_by_role("button", name="Preview redrive").click()
    expect(page.locator("#outcomes tbody tr")).to_have_count(3)
    admin.shot("dlq-preview")
    assert layout_faults(page) == [], "the redrive preview"


def test_overview_chart_and_store_state(admin: Admin, seeded: dict[str, str]) -> None:
    page = admin.page
    admin.goto("/admin/")
    expect(page.locator("#store")).to_contain_text("writeable")
    expect(page.locator("#store")).to_contain_text("ASYNC_FLUSH")
    expect(page.locator("#top-topics")).to_contain_text(seeded["topic"])
    expect(page.locator("#top-groups")).to_contain_text(seeded["group"])
    expect(page.locator(".chart[data-chart-ready=true] canvas")).to_have_count(1)
    traffic = admin.api.get("/admin/overview/traffic.json").json()
    assert [s["label"] for s in traffic["series"]] == ["in / s", "out / s"]
    assert len(traffic["x"]) == len(traffic["series"][0]["values"]) >= 1


def test_admin_pages_stay_out_of_the_openapi_document(live_server: LiveServer) -> None:
    paths = live_server.client().get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith("/admin")]


def test_every_state_changing_form_carries_a_csrf_field(
    admin: Admin, seeded: dict[str, str]
) -> None:
    page = admin.page
    for path in (
        "/admin/topics",
        f"/admin/topics/{quote(seeded['topic'])}",
        f"/admin/groups/{seeded['group']}",
        f"/admin/dlq/{seeded['group']}",
    ):
        admin.goto(path)
        for form in page.locator('form[method="post"]').all():
            assert form.locator('input[type=hidden][name="csrf_token"]').count() == 1, path
