"""Issue 15: contract edges a typed client and a fuzzer found — redrive pacing and redrive jobs,
whole-number floats for body integers, exact 64-bit bounds, the putGroup timestamp rule, group
name patterns (a trailing newline included) and required response fields."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from app.schemas import INT64_MAX
from services.redrive_jobs import RedriveJobState
from tests.conftest import LiveServer, start_server, wait_until

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT: dict[str, Any] = json.loads((ROOT / "openapi" / "openapi.json").read_text())
SCHEMAS: dict[str, Any] = DOCUMENT["components"]["schemas"]
JSON = {"content-type": "application/json"}


def kill(http: httpx.Client, group: str, topic: str, count: int) -> list[str]:
    """Send ``count`` messages to ``topic``, each straight to ``group``'s DLQ; the dead
    letters' msg_ids."""
    for i in range(count):
        sent = http.post(f"/v1/topics/{topic}/messages", json={"body": f"dead {i}"})
        assert sent.status_code == 201, sent.text
        msg_id = sent.json()["messages"][0]["msg_id"]
        back = http.post(f"/v1/groups/{group}/retry", json={"msg_id": msg_id, "delay_level": -1})
        assert back.json()["destination"] == "DLQ", back.text
    page = http.get(f"/v1/groups/{group}/dlq/messages", params={"limit": 100}).json()
    return [m["msg_id"] for m in page["messages"]]


def redriven(http: httpx.Client, topic: str) -> list[dict[str, Any]]:
    """Messages of ``topic`` that are redrive copies."""
    found = []
    for queue_id in range(8):
        pulled = http.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"max_messages": 100}
        ).json()
        found += [m for m in pulled["messages"] if "REDRIVEN_FROM" in m["properties"]]
    return found


# ==================================================================== 1. redrive rate and jobs


@pytest.mark.parametrize("rate", [5e-324, 0.001, 0, -1, 100_001, "5"])
def test_redrive_rate_outside_its_range_is_refused(
    client: httpx.Client, group: str, rate: Any
) -> None:
    for path in ("redrive", "redrive-jobs"):
        response = client.post(f"/v1/groups/{group}/dlq/{path}", json={"rate_per_second": rate})
        assert response.status_code == 422, response.text
        assert response.json()["errors"][0]["loc"] == ["body", "rate_per_second"]
    assert client.get(f"/v1/groups/{group}/dlq/redrive-jobs").json()["jobs"] == []


def test_a_paced_redrive_does_not_wait_after_its_last_message(
    live_server: LiveServer, topic: str, group: str
) -> None:
    # At the slowest rate a pause follows each send 10 s apart; the one send here has none
    # after it, so the call answers well within the client's 5 s (it used to hang).
    http = live_server.client(timeout=5)
    [dead] = kill(http, group, topic, 1)
    answer = http.post(f"/v1/groups/{group}/dlq/redrive", json={"rate_per_second": 0.1})
    assert answer.status_code == 200, answer.text
    assert [o["status"] for o in answer.json()["outcomes"]] == ["MOVED"]
    assert [m["properties"]["REDRIVEN_FROM"] for m in redriven(http, topic)] == [dead]


def test_a_redrive_too_long_for_one_call_is_refused_and_points_to_jobs(
    client: httpx.Client, topic: str, group: str
) -> None:
    kill(client, group, topic, 5)  # 4 pauses of 10 s: beyond the 30 s a call may take
    answer = client.post(f"/v1/groups/{group}/dlq/redrive", json={"rate_per_second": 0.1})
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["code"] == "REDRIVE_TOO_LONG"
    assert f"/v1/groups/{group}/dlq/redrive-jobs" in problem["detail"]
    assert redriven(client, topic) == [], "nothing is sent"
    preview = client.post(
        f"/v1/groups/{group}/dlq/redrive", json={"rate_per_second": 0.1, "dry_run": True}
    )
    assert preview.json()["summary"]["would_move"] == 5, "a dry run is never paced"


def test_a_redrive_job_runs_in_the_background_and_reports_its_outcomes(
    client: httpx.Client, topic: str, group: str
) -> None:
    dead = kill(client, group, topic, 3)
    created = client.post(f"/v1/groups/{group}/dlq/redrive-jobs", json={"limit": 3.0})
    assert created.status_code == 202, created.text
    job = created.json()
    assert job["state"] in ("queued", "running", "done")
    assert created.headers["location"] == f"/v1/groups/{group}/dlq/redrive-jobs/{job['id']}"
    location = created.headers["location"]
    wait_until(lambda: client.get(location).json()["state"] == "done")
    done = client.get(location).json()
    assert (done["total"], done["done"], done["summary"]["moved"]) == (3, 3, 3)
    assert [o["dlq_msg_id"] for o in done["outcomes"]] == dead
    assert done["finished_at"] >= done["created_at"] and done["error"] is None
    listed = client.get(f"/v1/groups/{group}/dlq/redrive-jobs").json()["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]
    again = client.post(f"/v1/groups/{group}/dlq/redrive-jobs", json={}).json()
    wait_until(lambda: client.get(f"{location[:-32]}{again['id']}").json()["state"] == "done")
    rerun = client.get(f"{location[:-32]}{again['id']}").json()
    assert rerun["summary"]["already_moved"] == 3, "a re-run sends nothing twice"
    assert len(redriven(client, topic)) == 3
    jobs = f"/v1/groups/{group}/dlq/redrive-jobs"
    first = client.get(jobs, params={"limit": 1}).json()
    assert ([j["id"] for j in first["jobs"]], first["total"]) == ([again["id"]], 2), "newest first"
    second = client.get(jobs, params={"limit": 1, "after": first["next_after"]}).json()
    assert [j["id"] for j in second["jobs"]] == [job["id"]]
    last = client.get(jobs, params={"limit": 1, "after": second["next_after"]}).json()
    assert (last["jobs"], last["next_after"]) == ([], None)


def test_a_cancelled_job_keeps_its_sends_and_a_rerun_finishes_the_rest(
    client: httpx.Client, topic: str, group: str
) -> None:
    kill(client, group, topic, 3)
    job = client.post(f"/v1/groups/{group}/dlq/redrive-jobs", json={"rate_per_second": 0.1}).json()
    location = f"/v1/groups/{group}/dlq/redrive-jobs/{job['id']}"
    wait_until(lambda: client.get(location).json()["done"] == 1)  # then a 10 s pause
    running = client.get(location).json()
    assert running["state"] == "running" and running["total"] == 3
    cancelled = client.post(f"{location}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    assert cancelled.json()["finished_at"] is not None
    assert client.post(f"{location}/cancel").json()["state"] == "cancelled", "idempotent"
    assert client.get(location).json()["state"] == "cancelled", "a cancelled job is kept"
    assert len(redriven(client, topic)) == 1
    rest = client.post(f"/v1/groups/{group}/dlq/redrive", json={}).json()["summary"]
    assert (rest["already_moved"], rest["moved"]) == (1, 2)
    assert len(redriven(client, topic)) == 3


def test_a_deleted_job_is_cancelled_and_gone(client: httpx.Client, topic: str, group: str) -> None:
    kill(client, group, topic, 3)
    job = client.post(f"/v1/groups/{group}/dlq/redrive-jobs", json={"rate_per_second": 0.1}).json()
    location = f"/v1/groups/{group}/dlq/redrive-jobs/{job['id']}"
    wait_until(lambda: client.get(location).json()["done"] == 1)
    deleted = client.delete(location)
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["state"] == "cancelled", "it answers the job as it ended"
    gone = client.get(location)
    assert gone.status_code == 404 and gone.json()["code"] == "REDRIVE_JOB_NOT_FOUND"
    assert client.delete(location).status_code == 404
    assert client.get(f"/v1/groups/{group}/dlq/redrive-jobs").json()["jobs"] == []
    assert len(redriven(client, topic)) == 1, "the send already made stays"


@pytest.mark.parametrize("job_id", ["0" * 32, "not-a-job"])
def test_unknown_redrive_jobs_are_404(client: httpx.Client, group: str, job_id: str) -> None:
    path = f"/v1/groups/{group}/dlq/redrive-jobs/{job_id}"
    for method, url in (("GET", path), ("DELETE", path), ("POST", f"{path}/cancel")):
        response = client.request(method, url)
        assert response.status_code == 404, response.text
        assert response.json()["code"] == "REDRIVE_JOB_NOT_FOUND"


def test_a_job_is_only_seen_under_its_own_group(client: httpx.Client, group: str) -> None:
    job = client.post(f"/v1/groups/{group}/dlq/redrive-jobs", json={"dry_run": True}).json()
    other = client.get(f"/v1/groups/{group}x/dlq/redrive-jobs/{job['id']}")
    assert other.status_code == 404


def test_shutdown_ends_paced_redrives_and_jobs_without_a_server_error(tmp_path: Path) -> None:
    live = start_server(tmp_path / "store")
    http = live.client()
    kill(http, "ShutG", "ShutT", 3)
    kill(http, "ShutJ", "ShutJT", 3)
    job = http.post("/v1/groups/ShutJ/dlq/redrive-jobs", json={"rate_per_second": 0.1}).json()
    jobs = live.broker.redrive_jobs  # kept: the broker hands out no services once stopped
    answers: list[httpx.Response] = []

    def held_redrive() -> None:
        with httpx.Client(base_url=live.url, timeout=60) as held:
            answers.append(held.post("/v1/groups/ShutG/dlq/redrive", json={"rate_per_second": 0.1}))

    thread = threading.Thread(target=held_redrive)
    thread.start()
    wait_until(lambda: len(redriven(http, "ShutT")) == 1 and len(redriven(http, "ShutJT")) == 1)
    live.stop()
    thread.join(timeout=60)
    [answer] = answers
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert "run it again" in answer.json()["detail"]
    [stopped] = jobs.of_group("ShutJ")
    assert stopped.id == job["id"] and stopped.state is RedriveJobState.CANCELLED
    assert len(stopped.outcomes) == 1


# ==================================================================== 2. whole-number floats


WHOLE_FLOATS: list[Any] = [
    (
        "PUT",
        "/v1/topics/{topic}",
        b'{"read_queue_nums": 4.0, "write_queue_nums": 4.0, "perm": 6.0}',
    ),
    ("POST", "/v1/topics/{topic}/messages", b'{"body": "x", "queue_id": 0.0, "delay_level": 0.0}'),
    ("POST", "/v1/topics/{topic}/messages", b'{"messages": [{"body": "x"}], "queue_id": 1.0}'),
    ("PUT", "/v1/groups/{group}/topics/{topic}/queues/0/offset", b'{"offset": 0.0}'),
    (
        "POST",
        "/v1/groups/{group}/offsets",
        b'{"offsets": [{"topic": "{topic}", "queue_id": 0.0, "offset": 0.0}]}',
    ),
    ("PUT", "/v1/groups/{group}", b'{"retry_queue_nums": 1.0, "retry_max_times": 3.0}'),
    ("PUT", "/v1/groups/{group}", b'{"consume_from": "timestamp", "consume_from_timestamp": 1e3}'),
    (
        "POST",
        "/v1/groups/{group}/offsets/reset",
        b'{"to": "offsets", "topic": "{topic}", "offsets": {"0": 0.0}, "dry_run": true}',
    ),
    ("POST", "/v1/groups/{group}/offsets/reset", b'{"to": "timestamp", "timestamp": 0.0}'),
    (
        "POST",
        "/v1/groups/{group}/dlq/redrive",
        b'{"limit": 10.0, "begin_timestamp": 0.0, "end_timestamp": 1e15}',
    ),
]


def test_whole_numbers_with_a_decimal_point_are_integers(
    client: httpx.Client, topic: str, group: str
) -> None:
    assert client.put(f"/v1/topics/{topic}", json={"read_queue_nums": 2}).status_code == 201
    for method, path, body in WHOLE_FLOATS:
        raw = body.replace(b"{topic}", topic.encode())
        response = client.request(
            method, path.format(topic=topic, group=group), content=raw, headers=JSON
        )
        assert response.status_code < 300, (path, response.text)
    assert client.get(f"/v1/topics/{topic}").json()["read_queue_nums"] == 4


@pytest.mark.parametrize("value", [b"4.5", b'"4"', b"true", b"1e400", b"4e30"])
def test_other_non_integers_are_still_refused(
    client: httpx.Client, topic: str, value: bytes
) -> None:
    response = client.put(
        f"/v1/topics/{topic}", content=b'{"read_queue_nums": ' + value + b"}", headers=JSON
    )
    assert response.status_code in (400, 422), response.text
    assert client.get(f"/v1/topics/{topic}").status_code == 404, "nothing was created"


# ==================================================================== 3. exact 64-bit bounds


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def test_integer_bounds_are_integers_and_int64_max_is_exact() -> None:
    for schema in _walk(DOCUMENT):
        if schema.get("type") == "integer":
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                assert not isinstance(schema.get(key), float), schema
            assert not {"ge", "le", "gt", "lt"} & schema.keys(), schema
    for model, field in [
        ("SendBackIn", "commit_log_offset"),
        ("RedriveIn", "begin_timestamp"),
        ("RedriveIn", "end_timestamp"),
        ("OffsetResetIn", "timestamp"),
    ]:
        field_schema = SCHEMAS[model]["properties"][field]
        [integer] = [s for s in _walk(field_schema) if "maximum" in s]
        assert integer["maximum"] == INT64_MAX and type(integer["maximum"]) is int
    assert "9.223372036854776e+18" not in (ROOT / "openapi" / "openapi.json").read_text()


# ==================================================================== 4. the putGroup rule


def test_put_group_documents_and_enforces_the_timestamp_rule(
    client: httpx.Client, group: str
) -> None:
    documented = SCHEMAS["GroupIn"]["properties"]["consume_from_timestamp"]["description"]
    assert "Required when consume_from is `timestamp`" in documented
    assert "refused (422) with `earliest` or `latest`" in documented
    refused = client.put(
        f"/v1/groups/{group}", json={"consume_from": "latest", "consume_from_timestamp": 1}
    )
    assert refused.status_code == 422, refused.text
    missing = client.put(f"/v1/groups/{group}", json={"consume_from": "timestamp"})
    assert missing.status_code == 422, missing.text
    ok = client.put(f"/v1/groups/{group}", json={"consume_from": "latest"})
    assert ok.status_code == 201 and ok.json()["consume_from_timestamp"] is None


# ==================================================================== 5. group name patterns


def test_the_pull_group_parameter_documents_its_pattern() -> None:
    operation = DOCUMENT["paths"]["/v1/topics/{topic}/queues/{queue_id}/messages"]["get"]
    [group] = [p for p in operation["parameters"] if p["name"] == "group"]
    [text] = [s for s in group["schema"]["anyOf"] if s.get("type") == "string"]
    path_group = DOCUMENT["paths"]["/v1/groups/{group}"]["get"]["parameters"][0]["schema"]
    assert text["pattern"] == path_group["pattern"]
    assert text["maxLength"] == path_group["maxLength"]


BAD_GROUPS = ["a b", "g\n", "g\r\n", "", "g" * 121]


@pytest.mark.parametrize("bad", BAD_GROUPS, ids=repr)
def test_bad_group_names_are_400_in_query_and_path(
    client: httpx.Client, topic: str, bad: str
) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 0})
    groups_before = client.get("/v1/groups").json()
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"group": bad})
    assert pulled.status_code == 400, pulled.text
    assert pulled.json()["code"] == "INVALID_GROUP_NAME"
    if not bad:
        return  # an empty path segment is another route
    quoted = quote(bad, safe="")
    for method, path, body in [
        ("PUT", f"/v1/groups/{quoted}", {}),
        ("GET", f"/v1/groups/{quoted}/topics/{topic}/messages", None),  # the fast route
        ("PUT", f"/v1/groups/{quoted}/topics/{topic}/queues/0/offset", {"offset": 0}),
        ("POST", f"/v1/groups/{quoted}/dlq/redrive-jobs", {}),
    ]:
        response = client.request(method, path, json=body)
        assert response.status_code == 400, (method, path, response.text)
        assert response.json()["code"] == "INVALID_GROUP_NAME"
    assert client.get("/v1/groups").json() == groups_before, "no group was created"


def test_a_trailing_newline_is_refused_in_topic_names(client: httpx.Client, group: str) -> None:
    assert client.put("/v1/topics/Nl%0A", json={}).status_code == 400
    assert client.post("/v1/topics/Nl%0A/messages", json={"body": "x"}).status_code == 400
    for path, body in [
        (
            f"/v1/groups/{group}/offsets",
            {"offsets": [{"topic": "Nl\n", "queue_id": 0, "offset": 0}]},
        ),
        (f"/v1/groups/{group}/dlq/redrive", {"target_topic": "Nl\n"}),
        (f"/v1/groups/{group}/offsets/reset", {"to": "earliest", "topic": "Nl\n"}),
    ]:
        response = client.post(path, json=body)
        assert response.status_code == 422, (path, response.text)
    assert all(t["topic"] != "Nl\n" for t in client.get("/v1/topics").json()["topics"])


# ==================================================================== 6. required response fields

SOMETIMES_ABSENT = {
    ("MessageOut", "queue_topic"),  # group pulls from the retry topic only
    ("ReceivedMessageOut", "queue_topic"),  # receives from the retry topic only
    ("Problem", "errors"),  # validation failures (422) only
}
"""The only optional response properties: each is left out of some answers."""


def _response_models() -> set[str]:
    """Every component schema a response refers to, directly or through another schema."""
    names: set[str] = set()
    todo = [
        content["schema"]
        for item in DOCUMENT["paths"].values()
        for operation in item.values()
        for response in operation["responses"].values()
        for content in response.get("content", {}).values()
    ]
    while todo:
        for node in _walk(todo.pop()):
            ref = node.get("$ref")
            if isinstance(ref, str) and (name := ref.rsplit("/", 1)[1]) not in names:
                names.add(name)
                todo.append(SCHEMAS[name])
    return names


def test_response_schemas_require_every_field_that_is_always_sent() -> None:
    models = _response_models()
    assert {"SendReceiptOut", "RedriveJobOut", "Problem", "MessageOut"} <= models
    optional = {
        (name, prop)
        for name in models
        for prop in SCHEMAS[name].get("properties", {})
        if prop not in SCHEMAS[name].get("required", [])
    }
    assert optional == SOMETIMES_ABSENT
    assert {"status", "delay_level", "deliver_at"} <= set(SCHEMAS["SendReceiptOut"]["required"])


def test_the_optional_response_fields_are_really_left_out_sometimes(
    client: httpx.Client, topic: str
) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 0})
    [message] = client.get(f"/v1/topics/{topic}/queues/0/messages").json()["messages"]
    assert "queue_topic" not in message
    problem = client.get(f"/v1/topics/{topic}Missing").json()
    assert problem["code"] == "TOPIC_NOT_FOUND" and "errors" not in problem


@pytest.mark.parametrize("text", ["+0.0", "0.0", "1_0", " 1", "0x1"])
def test_integer_parameters_are_decimal_digits_only(
    client: httpx.Client, topic: str, group: str, text: str
) -> None:
    client.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 0})
    for path, params in [
        (f"/v1/topics/{topic}/queues/0/messages", {"offset": text}),
        (f"/v1/topics/{topic}/messages", {"key": "k", "max_messages": text}),
        (f"/v1/groups/{group}/dlq/messages", {"limit": text}),
    ]:
        response = client.get(path, params=params)
        assert response.status_code == 422, (path, response.text)
        assert response.json()["errors"][0]["type"] == "int_parsing"
    # A time is epoch ms or ISO 8601, and neither of those.
    response = client.get(f"/v1/topics/{topic}/queues/0/offset", params={"timestamp": text})
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["type"] == "timestamp_parsing"
    assert client.get(f"/v1/topics/{topic}/queues/+0/messages").status_code == 200
    assert client.get(f"/v1/topics/{topic}/queues/0.0/messages").status_code == 422


# ==================================================================== key rules are documented


@pytest.mark.parametrize("key", ["a\x01b", "a\x02", "two words"])
def test_raw_body_keys_the_document_refuses_are_refused(
    client: httpx.Client, topic: str, key: str
) -> None:
    [keys] = [
        p
        for p in DOCUMENT["paths"]["/v1/topics/{topic}/messages"]["post"]["parameters"]
        if p["name"] == "keys"
    ]
    [items] = [s["items"] for s in keys["schema"]["anyOf"] if "items" in s]
    pattern = re.compile(items["pattern"].replace("\\u0001", "\x01").replace("\\u0002", "\x02"))
    assert pattern.match("order-42") and not pattern.match(key)
    assert "U+0001" in items["description"]
    response = client.post(
        f"/v1/topics/{topic}/messages",
        params={"keys": key},
        content=b"x",
        headers={"content-type": "application/octet-stream"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "INVALID_PROPERTY"
