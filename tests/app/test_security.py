"""Issue 8: tokens and permissions on every route, safe defaults, quotas, admin login, audit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi.routing import APIRoute
from hypothesis import given
from hypothesis import strategies as st
from starlette.datastructures import QueryParams
from starlette.routing import Mount, Route

from app.cli import main as cli_main
from app.main import create_app
from app.routes.direct import query_pairs
from app.routes.table import route_key
from app.security import (
    AuthFileError,
    UnsafeBindError,
    check_bind,
    check_ha_bind,
    hash_token,
    is_loopback,
    load_auth_file,
    replica_keys,
)
from app.security.middleware import _cap_max_bytes
from app.security.policy import RULES, Access
from app.security.principals import ConsumeGrant, Pattern, Principal
from app.security.quotas import TokenBucket
from app.security.sessions import csrf_from_body, set_cookie, tokens_match
from app.settings import Settings
from services.ha.auth import replica_key
from tests.app.auth_support import AuthServer, start_auth_server, write_auth_file
from tests.conftest import LiveServer, wait_until

BIN = Path(sys.executable).parent
WRONG_TOKEN = "smq_" + "x" * 43

# ==================================================================== the route table

ADMIN = ("admin", "everything-but-admin")
EXPECTED: dict[str, tuple[str, str | None]] = {
    # key: (a token that may call it, a valid token that may not — None: every token may)
    "sendMessages": ("producer", "stranger"),
    "pullMessages": ("consumer", "stranger"),
    "readQueueRecords": ("consumer", "stranger"),
    "queryMessagesByKey": ("consumer", "stranger"),
    "getMessage": ("consumer", "stranger"),
    "getDelayLevels": ("nobody", None),
    "cancelTimer": ("producer", "stranger"),
    "getTimerStatus": ("nobody", None),
    "getTopic": ("producer", "stranger"),
    "getOffsetByTime": ("consumer", "stranger"),
    "getGroup": ("consumer", "stranger"),
    "pullGroupMessages": ("consumer", "stranger"),
    "commitOffset": ("consumer", "stranger"),
    "commitOffsets": ("consumer", "stranger"),
    "getGroupOffsets": ("consumer", "stranger"),
    "sendBack": ("consumer", "stranger"),
    "listDeadLetters": ("consumer", "stranger"),
    "receiveMessages": ("consumer", "stranger"),
    "ackMessages": ("consumer", "stranger"),
    "changeInvisibility": ("consumer", "stranger"),
    "sendHalfMessage": ("producer", "stranger"),
    "getTransaction": ("producer", "stranger"),
    "commitTransaction": ("producer", "stranger"),
    "rollbackTransaction": ("producer", "stranger"),
    "answerTransactionUnknown": ("producer", "stranger"),
    "pollTransactionChecks": ("producer", "stranger"),  # and only its topics' checks
    "metrics": ("nobody", None),
    "openapi": ("nobody", None),
    "swagger_ui": ("nobody", None),
    "redoc": ("nobody", None),
}
"""Every route not named here (admin routes, /admin pages, new routes) needs an admin."""
PUBLIC = {"healthz", "readyz", "static", "favicon"}
LOGIN_FORM = {"login_form", "login"}  # public by design; tested on their own below

BODIES: dict[str, Any] = {
    "sendMessages": {"body": "x"},
    "putTopic": {},
    "putGroup": {},
    "commitOffset": {"offset": 0},
    "resetOffsets": {"to": "earliest", "dry_run": True},
    "redriveDeadLetters": {"dry_run": True},
    "receiveMessages": {},
    "ackMessages": {"receipt_handles": ["not-a-handle"]},
    "changeInvisibility": {"receipt_handle": "not-a-handle", "invisible_ms": 1000},
    "sendHalfMessage": {"producer_group": "pg", "message": {"body": "x"}},
    "commitTransaction": {"producer_group": "pg"},
    "rollbackTransaction": {"producer_group": "pg"},
    "answerTransactionUnknown": {"producer_group": "pg"},
    "pollTransactionChecks": {},
}
QUERIES: dict[str, dict[str, str]] = {
    "queryMessagesByKey": {"key": "k"},
    "getOffsetByTime": {"timestamp": "0"},
}
MOUNT_PATHS = {
    "static": "/static/swagger-ui/swagger-ui.css",
    "admin-static": "/admin/static/vendor/htmx.min.js",
}


def _route_cases() -> list[Any]:
    app = create_app(Settings.model_construct())
    cases, seen = [], set()
    for route in _flat_routes(app):
        key = route_key(route)
        if key in LOGIN_FORM:
            continue
        methods: set[str] = set(getattr(route, "methods", None) or ())
        for method in sorted(methods - {"HEAD"}) or ["GET"]:
            template = MOUNT_PATHS.get(key or "", getattr(route, "path", ""))
            shape = (method, re.sub(r"\{(\w+)(:\w+)?\}", r"{\1}", template))
            if shape in seen:
                continue
            seen.add(shape)
            cases.append(pytest.param(key, method, template, id=f"{method} {template}"))
    return cases


def _flat_routes(app: Any) -> list[Any]:
    """The routes the app's route table matches: its own list's routes and mounts."""
    return [r for r in app.router.routes if isinstance(r, APIRoute | Route | Mount)]


ROUTE_CASES = _route_cases()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthServer]:
    server = start_auth_server(tmp_path_factory.mktemp("secured"))
    yield server
    server.stop()


def _names(key: str | None, method: str) -> tuple[str, str]:
    suffix = re.sub(r"[^A-Za-z0-9]", "", f"{key}{method}")[:60]
    return f"Sec_{suffix}", f"SecG_{suffix}"


def _prepare(secured: AuthServer, topic: str, group: str) -> tuple[str, str]:
    """The topic, the group, one message in it and one open transaction on it (admin); the
    message's msg_id and the transaction's id."""
    admin = secured.client("admin")
    assert admin.put(f"/v1/topics/{topic}", json={}).status_code in (200, 201)
    assert admin.put(f"/v1/groups/{group}", json={}).status_code in (200, 201)
    sent = admin.post(f"/v1/topics/{topic}/messages", json={"body": "x", "queue_id": 0})
    assert sent.status_code == 201, sent.text
    half = admin.post(
        f"/v1/topics/{topic}/transactions",
        json={"producer_group": "pg", "message": {"body": "x"}},
    )
    assert half.status_code == 201, half.text
    return str(sent.json()["messages"][0]["msg_id"]), str(half.json()["transaction_id"])


def _request(
    key: str | None,
    method: str,
    template: str,
    topic: str,
    group: str,
    ids: tuple[str, str],
) -> tuple[str, str, dict[str, Any]]:
    msg_id, transaction_id = ids
    values = {
        "topic": topic,
        "group": group,
        "queue_id": "0",
        "msg_id": msg_id,
        "transaction_id": transaction_id,
    }

    def fill(match: re.Match[str]) -> str:
        return quote(values.get(match.group(1), "x"), safe="")

    path = re.sub(r"\{(\w+)(:\w+)?\}", fill, template)
    kwargs: dict[str, Any] = {"params": QUERIES.get(key or "", {})}
    body = BODIES.get(key or "")
    if key == "commitOffsets":
        body = {"offsets": [{"topic": topic, "queue_id": 0, "offset": 0}]}
    elif key == "sendBack":
        body = {"msg_id": msg_id}
    if body is not None:
        kwargs["json"] = body
    elif method in ("POST", "PUT", "PATCH") and path.startswith("/admin"):
        kwargs["data"] = {}
    return method, path, kwargs


def assert_unauthorized(response: httpx.Response) -> None:
    assert response.status_code == 401, response.text
    assert response.headers["www-authenticate"].startswith('Bearer realm="spoolmq"')
    assert response.json()["code"] == "UNAUTHORIZED"


@pytest.mark.parametrize(("key", "method", "template"), ROUTE_CASES)
def test_every_route_checks_the_token(
    secured: AuthServer, key: str | None, method: str, template: str
) -> None:
    topic, group = _names(key, method)
    ids = _prepare(secured, topic, group)
    method, path, kwargs = _request(key, method, template, topic, group, ids)
    right, without = EXPECTED.get(key or "", ADMIN)

    def call(who: str | None, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else secured.headers(who)
        with httpx.Client(base_url=secured.url, timeout=30, headers=headers) as client:
            return client.request(method, path, **kwargs)

    if key in PUBLIC:
        for response in (call(None), call(None, WRONG_TOKEN)):
            assert response.status_code < 400, response.text
        return
    anonymous = call(None)
    if path.startswith("/admin") and method == "GET":
        assert anonymous.status_code == 303
        assert anonymous.headers["location"].startswith("/admin/login?next=")
    else:
        assert_unauthorized(anonymous)
    assert_unauthorized(call(None, WRONG_TOKEN))
    if without is not None:
        refused = call(without)
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "FORBIDDEN"
    allowed = call(right)
    assert allowed.status_code not in (401, 403), allowed.text
    assert allowed.status_code < 500, allowed.text


def test_the_table_test_sees_every_operation_and_names_only_real_routes() -> None:
    app = create_app(Settings.model_construct())
    keys = {route_key(route) for route in _flat_routes(app)}
    operations = {
        op["operationId"] for item in app.openapi()["paths"].values() for op in item.values()
    }
    assert operations <= keys
    assert set(EXPECTED) <= keys
    assert set(RULES) <= keys
    # A rule that is not admin must be in EXPECTED, or the table test above expects admin.
    for key, rule in RULES.items():
        if rule.access not in (Access.ADMIN, Access.PUBLIC) and key in keys:
            assert key in EXPECTED, key


def test_a_transaction_needs_its_producer_group_as_well_as_its_topic(
    secured: AuthServer,
) -> None:
    topic = "SecTxGroups"
    admin, producer = secured.client("admin"), secured.client("producer")
    topic_only = secured.client("topic-only")
    assert admin.put(f"/v1/topics/{topic}", json={}).status_code in (200, 201)
    half = {"producer_group": "pg", "message": {"body": "x"}}
    refused = topic_only.post(f"/v1/topics/{topic}/transactions", json=half)
    assert refused.status_code == 403 and refused.json()["code"] == "FORBIDDEN"
    other_group = {"producer_group": "other", "message": {"body": "x"}}
    assert producer.post(f"/v1/topics/{topic}/transactions", json=other_group).status_code == 403
    sent = producer.post(f"/v1/topics/{topic}/transactions", json=half)
    assert sent.status_code == 201, sent.text
    transaction = f"/v1/transactions/{sent.json()['transaction_id']}"
    assert topic_only.get(transaction).status_code == 403
    for how in ("commit", "rollback", "unknown"):
        ended = topic_only.post(f"{transaction}/{how}", json={"producer_group": "pg"})
        assert ended.status_code == 403, how
    poll = topic_only.post("/v1/producer-groups/pg/transaction-checks", json={"wait_ms": 0})
    assert poll.status_code == 403
    assert producer.post(f"{transaction}/commit", json={"producer_group": "pg"}).status_code == 200
    pulled = admin.get(
        f"/v1/topics/{topic}/queues/{sent.json()['queue_id']}/messages", params={"offset": 0}
    )
    assert [m["body"] for m in pulled.json()["messages"]] == ["x"]


def test_forbidden_never_says_whether_a_topic_exists(secured: AuthServer) -> None:
    admin, stranger = secured.client("admin"), secured.client("stranger")
    assert admin.put("/v1/topics/SecExists", json={}).status_code in (200, 201)
    for path in ("/v1/topics/{}", "/v1/topics/{}/queues/0/messages", "/v1/groups/G/offsets"):
        answers = []
        for topic in ("SecExists", "SecNeverMade"):
            url = path.format(topic) if "{}" in path else f"{path}?topic={topic}"
            response = stranger.get(url)
            assert response.status_code == 403, response.text
            answers.append(response.json()["detail"].replace(topic, "T"))
        assert answers[0] == answers[1]
    created = {t["topic"] for t in admin.get("/v1/topics").json()["topics"]}
    assert "SecNeverMade" not in created


def test_body_and_message_checks(secured: AuthServer) -> None:
    admin, consumer = secured.client("admin"), secured.client("consumer")
    for topic in ("SecMine", "Private"):
        assert admin.put(f"/v1/topics/{topic}", json={}).status_code in (200, 201)
    mine = admin.post("/v1/topics/SecMine/messages", json={"body": "a", "queue_id": 0})
    private = admin.post("/v1/topics/Private/messages", json={"body": "b", "queue_id": 0})
    mine_id = mine.json()["messages"][0]["msg_id"]
    private_id = private.json()["messages"][0]["msg_id"]
    private_offset = private.json()["messages"][0]["commit_log_offset"]

    def offsets(topic: str) -> dict[str, Any]:
        return {"offsets": [{"topic": topic, "queue_id": 0, "offset": 0}]}

    assert consumer.post("/v1/groups/SecG1/offsets", json=offsets("SecMine")).status_code == 200
    assert consumer.post("/v1/groups/SecG1/offsets", json=offsets("Private")).status_code == 403
    assert consumer.get(f"/v1/messages/{mine_id}").status_code == 200
    assert consumer.get(f"/v1/messages/{private_id}").status_code == 403
    assert consumer.get(f"/v1/messages/{'0' * 32}").status_code == 403  # none: same answer
    assert consumer.get("/v1/messages/XYZ").status_code == 400  # malformed: nothing looked up
    sent_back = consumer.post("/v1/groups/SecG1/retry", json={"msg_id": mine_id})
    assert sent_back.status_code == 200, sent_back.text
    for body in ({"msg_id": private_id}, {"commit_log_offset": private_offset}):
        assert consumer.post("/v1/groups/SecG1/retry", json=body).status_code == 403
    # The group's own retry topic is the group's: readable with a grant on the group.
    retry = consumer.get(f"/v1/topics/{quote('%RETRY%SecG1', safe='')}/queues/0/messages")
    assert retry.status_code == 200, retry.text
    other = consumer.get(f"/v1/topics/{quote('%RETRY%OtherG', safe='')}/queues/0/messages")
    assert other.status_code == 403


def test_anonymous_loopback_server_works_as_before(live_server: LiveServer) -> None:
    client = live_server.client()
    assert client.put("/v1/topics/AnonT", json={}).status_code in (200, 201)
    assert client.post("/v1/topics/AnonT/messages", json={"body": "x"}).status_code == 201
    assert client.get("/metrics").status_code == 200
    spec = client.get("/openapi.json").json()
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert spec["paths"]["/v1/topics"]["get"]["security"] == [{"bearerAuth": []}, {}]
    assert spec["paths"]["/healthz"]["get"]["security"] == []


def test_secured_document_requires_the_token(secured: AuthServer) -> None:
    spec = secured.client("nobody").get("/openapi.json").json()
    send = spec["paths"]["/v1/topics/{topic}/messages"]["post"]
    assert send["security"] == [{"bearerAuth": []}]
    assert {"401", "403", "408", "429"} <= set(send["responses"])
    assert "403" not in spec["paths"]["/metrics"]["get"]["responses"]


# ==================================================================== safe by default


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.5", False),
        ("example.org", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    if loopback:
        check_bind(host, auth_enabled=False, allow_anonymous=False)
    else:
        with pytest.raises(UnsafeBindError, match="--auth-file"):
            check_bind(host, auth_enabled=False, allow_anonymous=False)
    check_bind(host, auth_enabled=True, allow_anonymous=False)
    check_bind(host, auth_enabled=False, allow_anonymous=True)


def test_the_ha_port_beyond_loopback_needs_an_auth_file_and_tls() -> None:
    with pytest.raises(UnsafeBindError, match="without --auth-file and --tls-cert/--tls-key"):
        check_ha_bind("0.0.0.0", auth_enabled=False, tls_enabled=False, allow_anonymous=False)
    with pytest.raises(UnsafeBindError, match="without --tls-cert/--tls-key: anyone"):
        check_ha_bind("10.0.0.5", auth_enabled=True, tls_enabled=False, allow_anonymous=False)
    check_ha_bind("10.0.0.5", auth_enabled=True, tls_enabled=True, allow_anonymous=False)
    check_ha_bind("10.0.0.5", auth_enabled=False, tls_enabled=False, allow_anonymous=True)
    check_ha_bind("127.0.0.1", auth_enabled=False, tls_enabled=False, allow_anonymous=False)


def test_slaves_prove_the_admin_tokens_of_the_auth_file(tmp_path: Path) -> None:
    tokens = write_auth_file(tmp_path / "auth.toml", {"ops": {"admin": True}, "app": {}})
    assert replica_keys(None) is None  # no auth file: the HA port is open
    assert replica_keys(tmp_path / "auth.toml") == frozenset({replica_key(tokens["ops"])})


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "spoolmq"), "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_serve_refuses_a_public_address_without_auth(tmp_path: Path) -> None:
    # Never reaches bind(): the check runs before the app and the server are built.
    result = _serve("--host", "0.0.0.0", "--port", "18089", "--store-dir", str(tmp_path / "store"))
    assert result.returncode == 2
    assert "refusing to listen on '0.0.0.0' without authentication" in result.stderr
    assert "--allow-anonymous" in result.stderr
    assert not (tmp_path / "store").exists()


def test_serve_refuses_a_bad_auth_file(tmp_path: Path) -> None:
    bad = tmp_path / "auth.toml"
    bad.write_text('[[tokens]]\nname = "x"\nsha256 = "nothex"\n')
    result = _serve("--auth-file", str(bad), "--store-dir", str(tmp_path / "s"), "--port", "0")
    assert result.returncode == 2
    assert f"the auth file {bad} is not valid" in result.stderr
    assert "tokens[0].sha256" in result.stderr
    missing = _serve("--auth-file", str(tmp_path / "nope.toml"), "--port", "0")
    assert missing.returncode == 2
    assert "cannot read the auth file" in missing.stderr


DIGEST = "a" * 64


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("tokens = [", "not valid TOML", id="toml-syntax"),
        pytest.param("", "tokens: Field required", id="empty"),
        pytest.param(
            f'[[tokens]]\nname = "a"\nsha256 = "{DIGEST}"\nproduces = ["x"]\n',
            "tokens[0].produces: Extra inputs are not permitted",
            id="typo-in-a-key",
        ),
        pytest.param(
            f'[[tokens]]\nname = "a"\nsha256 = "{DIGEST}"\n'
            f'[[tokens]]\nname = "a"\nsha256 = "{"b" * 64}"\n',
            "name 'a' is used twice",
            id="duplicate-name",
        ),
        pytest.param(
            f'[[tokens]]\nname = "a"\nsha256 = "{DIGEST}"\nconsume = ["no-colon"]\n',
            "tokens[0].consume",
            id="bad-consume-grant",
        ),
        pytest.param(
            f'[[tokens]]\nname = "a"\nsha256 = "{DIGEST}"\nadmin = "yes"\n',
            "tokens[0].admin",
            id="admin-not-a-bool",
        ),
        pytest.param(
            f'[[tokens]]\nname = "a"\nsha256 = "{DIGEST}"\nproduce = ["a/b"]\n',
            "tokens[0].produce[0]",
            id="bad-pattern",
        ),
    ],
)
def test_auth_file_errors_are_clear(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "auth.toml"
    path.write_text(text)
    with pytest.raises(AuthFileError, match=re.escape(message)):
        load_auth_file(path)


def test_json_auth_file_and_consume_tables(tmp_path: Path) -> None:
    path = tmp_path / "auth.json"
    entry = {
        "name": "svc",
        "sha256": hash_token("secret").upper(),
        "consume": [{"group": "g*", "topic": "T"}, "h:U*"],
    }
    path.write_text(json.dumps({"tokens": [entry]}))
    principal = load_auth_file(path).authenticate("secret")
    assert principal is not None and principal.name == "svc"
    assert principal.may_consume("g1", "T") and principal.may_consume("h", "U2")
    assert not principal.may_consume("h", "T") and not principal.may_produce("T")
    assert load_auth_file(path).authenticate("Secret") is None


def test_token_create_prints_a_token_and_its_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["token", "create", "--name", "orders", "--produce", "Orders*"]
    argv += ["--consume", "billing:Orders*", "--rate-per-s", "50"]
    assert cli_main(argv) == 0
    printed = capsys.readouterr()
    # stdout is the entry alone (`>> auth.toml` works); the token is stderr's last line.
    token = printed.err.splitlines()[-1]
    assert re.fullmatch(r"smq_\S+", token)
    assert token not in printed.out  # the file holds only the digest
    assert printed.out.startswith("[[tokens]]")
    (tmp_path / "auth.toml").write_text(printed.out)
    principal = load_auth_file(tmp_path / "auth.toml").authenticate(token)
    assert principal is not None
    assert (principal.name, principal.rate_per_s) == ("orders", 50.0)
    assert principal.may_produce("Orders-EU") and not principal.may_produce("Refunds")
    assert principal.may_consume("billing", "Orders") and not principal.admin
    assert cli_main(["token", "create", "--name", "x", "--consume", "nocolon"]) == 2


def test_grants() -> None:
    p = Principal("p", consume=(ConsumeGrant.parse("team-*:Orders*"),))
    assert p.may_consume("team-a", "Orders1") and p.may_consume(None, "Orders1")
    assert p.may_consume("team-a", None) and not p.may_consume("other", None)
    assert p.may_consume("team-a", "%RETRY%team-a") and p.may_consume(None, "%DLQ%team-b")
    assert not p.may_consume("team-a", "%RETRY%team-b") and not p.may_consume(None, "%DLQ%x")
    assert not p.may_see_topic("Refunds") and p.may_see_topic("Orders")
    everything = Principal("e", produce=(Pattern.of("*"),), consume=(ConsumeGrant.parse("*:*"),))
    assert not everything.may_consume("g", "SCHEDULE_TOPIC_XXXX")
    assert not everything.may_see_topic("SCHEDULE_TOPIC_XXXX") and everything.may_see_topic("X")
    with pytest.raises(ValueError, match="GROUP:TOPIC"):
        ConsumeGrant.parse("nope")


# ==================================================================== quotas


def test_token_bucket() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.5) == 0.0
    assert bucket.take(100.0) == 0.0 and bucket.tokens == 2.0  # refilled up to the burst only


def test_a_token_over_its_rate_gets_429_while_others_are_served(secured: AuthServer) -> None:
    slow, other = secured.client("slow"), secured.client("everything-but-admin")
    # "slow" may make 2 requests at once, then one every 1000 s.
    assert [slow.get("/metrics").status_code for _ in range(2)] == [200, 200]
    refused = slow.get("/metrics")
    assert refused.status_code == 429
    assert refused.json()["code"] == "RATE_LIMITED"
    assert int(refused.headers["retry-after"]) >= 1
    assert slow.post("/v1/topics/SecX/messages", json={"body": "x"}).status_code == 429
    assert [other.get("/metrics").status_code for _ in range(5)] == [200] * 5


def test_parked_long_polls_are_capped_per_token(secured: AuthServer) -> None:
    admin = secured.client("admin")
    one_queue = {"read_queue_nums": 1, "write_queue_nums": 1}
    assert admin.put("/v1/topics/Parked", json=one_queue).status_code in (200, 201)
    first: dict[str, Any] = {}

    def park() -> None:
        with httpx.Client(base_url=secured.url, timeout=60, headers=secured.headers("parker")) as c:
            first["response"] = c.get("/v1/topics/Parked/queues/0/messages?wait_ms=25000")

    thread = threading.Thread(target=park)
    thread.start()
    wait_until(lambda: secured.live.broker.waiters.parked == 1)
    parker = secured.client("parker")
    second = parker.get("/v1/topics/Parked/queues/0/messages", params={"wait_ms": 1000})
    assert second.status_code == 429
    assert second.json()["code"] == "TOO_MANY_WAITERS"
    assert second.headers["retry-after"] == "1"
    assert parker.get("/v1/topics/Parked/queues/0/messages").status_code == 200  # no wait
    other = secured.client("everything-but-admin")
    assert other.get("/v1/topics/Parked/queues/0/messages?wait_ms=10").status_code == 200
    sent = admin.post("/v1/topics/Parked/messages", json={"body": "wake", "queue_id": 0})
    assert sent.status_code == 201
    thread.join(timeout=60)
    assert first["response"].status_code == 200
    assert [m["body"] for m in first["response"].json()["messages"]] == ["wake"]
    # The token's slot was given back: it may park again.
    again = parker.get("/v1/topics/Parked/queues/0/messages", params={"offset": 1, "wait_ms": 10})
    assert again.status_code == 200, again.text


# ==================================================================== admin login


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def test_admin_login_session_csrf_and_logout(secured: AuthServer) -> None:
    browser = secured.client(follow_redirects=False)
    assert browser.get("/admin/topics").headers["location"] == "/admin/login?next=%2Fadmin%2Ftopics"
    form = browser.get("/admin/login", params={"next": "/admin/topics"})
    assert form.status_code == 200
    login_csrf = _csrf(form.text)

    def log_in(token: str, csrf: str | None = login_csrf) -> httpx.Response:
        fields = {"token": token, "next": "/admin/topics"}
        if csrf is not None:
            fields["csrf_token"] = csrf
        return browser.post("/admin/login", data=fields)

    wrong = log_in(WRONG_TOKEN)
    assert wrong.status_code == 401 and "That token is not valid." in wrong.text
    not_admin = log_in(secured.tokens["everything-but-admin"], _csrf(wrong.text))
    assert not_admin.status_code == 403
    assert "&#39;everything-but-admin&#39; is not an admin token" in not_admin.text
    assert log_in(secured.tokens["admin"], csrf=None).status_code == 403  # no CSRF token
    assert "spoolmq_session" not in browser.cookies

    ok = log_in(secured.tokens["admin"], _csrf(browser.get("/admin/login").text))
    assert ok.status_code == 303 and ok.headers["location"] == "/admin/topics"
    cookie = next(v for v in ok.headers.get_list("set-cookie") if v.startswith("spoolmq_session="))
    attributes = [a.strip() for a in cookie.split(";")]
    assert "HttpOnly" in attributes and "SameSite=Strict" in attributes
    assert "Secure" not in attributes  # plain http here; https gets Secure (below)

    page = browser.get("/admin/topics")
    assert page.status_code == 200
    assert browser.get("/docs").status_code == 200  # the session opens the docs too
    assert browser.get("/openapi.json").status_code == 200
    assert browser.get("/v1/topics").status_code == 401  # but not the API
    csrf = _csrf(page.text)  # the admin templates write the session's token
    refused = browser.post("/admin/topics", data={"topic": "SecLoginT"})
    assert refused.status_code == 403 and refused.json()["code"] == "CSRF_FAILED"
    stale = browser.post("/admin/topics", data={"topic": "SecLoginT", "csrf_token": "old"})
    assert stale.status_code == 403
    created = browser.post("/admin/topics", data={"topic": "SecLoginT", "csrf_token": csrf})
    assert created.status_code not in (401, 403), created.text
    header = browser.post(
        "/admin/topics", data={"topic": "SecLoginU"}, headers={"X-CSRF-Token": csrf}
    )
    assert header.status_code not in (401, 403), header.text

    assert browser.post("/admin/logout").status_code == 403  # logging out needs the token too
    out = browser.post("/admin/logout", data={"csrf_token": csrf})
    assert out.status_code == 303 and out.headers["location"] == "/admin/login"
    assert any(
        v.startswith("spoolmq_session=;") and "Max-Age=0" in v
        for v in out.headers.get_list("set-cookie")
    )
    old_session = httpx.Cookies({"spoolmq_session": cookie.split(";")[0].split("=", 1)[1]})
    with httpx.Client(base_url=secured.url, cookies=old_session) as stale_browser:
        assert stale_browser.get("/admin/topics", follow_redirects=False).status_code == 303


def test_login_redirects_only_inside_admin(secured: AuthServer) -> None:
    browser = secured.client(follow_redirects=False)
    for target in ("https://evil.example/", "//evil.example/admin", "/v1/topics", "/admin\\x"):
        csrf = _csrf(browser.get("/admin/login").text)
        fields = {"token": secured.tokens["admin"], "csrf_token": csrf, "next": target}
        assert browser.post("/admin/login", data=fields).headers["location"] == "/admin/"


async def test_cookies_are_secure_over_https(tmp_path: Path) -> None:
    auth = tmp_path / "auth.toml"
    auth.write_text(f'[[tokens]]\nname = "ops"\nsha256 = "{hash_token("t")}"\nadmin = true\n')
    app = create_app(Settings(store_dir=tmp_path / "store", auth_file=auth))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://spoolmq.test") as browser:
        form = await browser.get("/admin/login")
        assert "Secure" in form.headers["set-cookie"]
        ok = await browser.post("/admin/login", data={"token": "t", "csrf_token": _csrf(form.text)})
        assert ok.status_code == 303
        session = next(v for v in ok.headers.get_list("set-cookie") if "spoolmq_session=" in v)
        assert "; Secure" in session and "HttpOnly" in session and "SameSite=Strict" in session
    assert set_cookie("c", "v", secure=False)[1] == b"c=v; Path=/; HttpOnly; SameSite=Strict"


def test_admin_forms_need_csrf_without_auth_too(live_server: LiveServer) -> None:
    browser = live_server.client(follow_redirects=False)
    page = browser.get("/admin/topics")
    assert page.status_code == 200
    assert "spoolmq_csrf" in browser.cookies
    csrf = _csrf(page.text)
    assert csrf == browser.cookies["spoolmq_csrf"]
    refused = browser.post("/admin/topics", data={"topic": "AnonAdminT"})
    assert refused.status_code == 403 and refused.json()["code"] == "CSRF_FAILED"
    other_site = httpx.post(f"{live_server.url}/admin/topics", data={"csrf_token": csrf})
    assert other_site.status_code == 403  # a form from elsewhere has no cookie to match
    accepted = browser.post("/admin/topics", data={"topic": "AnonAdminT", "csrf_token": csrf})
    assert accepted.status_code not in (401, 403), accepted.text
    assert browser.get("/admin/login").status_code == 303  # nothing to log in to


def test_csrf_token_is_read_from_every_form_encoding() -> None:
    urlencoded = "application/x-www-form-urlencoded; charset=utf-8"
    assert csrf_from_body(urlencoded, b"a=1&csrf_token=t%2Bk&b=2") == "t+k"
    multipart = (
        b'--XX\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n'
        b'--XX\r\nContent-Disposition: form-data; name="csrf_token"\r\n\r\ntok\r\n--XX--\r\n'
    )
    assert csrf_from_body("multipart/form-data; boundary=XX", multipart) == "tok"
    assert csrf_from_body("application/json", b'{"csrf_token": "tok"}') is None
    assert csrf_from_body(urlencoded, b"\xff=\xfe") is None
    assert not tokens_match("tok", "") and not tokens_match("", "") and tokens_match("t", "t")


# ==================================================================== audit log


def _audit_lines(server: AuthServer) -> list[dict[str, Any]]:
    path = server.live.store_dir / "audit.log"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines()]


def test_admin_actions_are_audited(secured: AuthServer) -> None:
    admin, other = secured.client("admin"), secured.client("everything-but-admin")
    before = len(_audit_lines(secured))
    responses = [
        admin.put("/v1/topics/SecAudit", json={}),
        admin.put("/v1/groups/SecAuditG", json={}),
        admin.post("/v1/groups/SecAuditG/offsets/reset", json={"to": "latest", "dry_run": True}),
        admin.post("/v1/groups/SecAuditG/offsets/reset", json={"to": "latest"}),
        admin.post("/v1/groups/SecAuditG/dlq/redrive", json={"dry_run": True}),
        other.delete("/v1/topics/SecAudit"),
        admin.delete("/v1/groups/SecAuditG"),
        admin.delete("/v1/topics/SecAudit"),
        admin.get("/v1/topics"),  # reading is not an action
        other.post("/admin/topics", data={"topic": "SecAuditPage"}),
        admin.post("/admin/topics", data={"topic": "SecAuditPage"}),
    ]
    lines = _audit_lines(secured)[before:]
    expected = [
        ("admin", "putTopic", "topic:SecAudit", responses[0]),
        ("admin", "putGroup", "group:SecAuditG", responses[1]),
        ("admin", "resetOffsets", "group:SecAuditG", responses[3]),
        ("everything-but-admin", "deleteTopic", "topic:SecAudit", responses[5]),
        ("admin", "deleteGroup", "group:SecAuditG", responses[6]),
        ("admin", "deleteTopic", "topic:SecAudit", responses[7]),
        ("everything-but-admin", "POST /admin/topics", "/admin/topics", responses[9]),
        ("admin", "POST /admin/topics", "/admin/topics", responses[10]),
    ]
    assert len(lines) == len(expected), [(x["who"], x["what"], x["result"]) for x in lines]
    for line, (who, what, target, response) in zip(lines, expected, strict=True):
        assert (line["who"], line["what"], line["target"]) == (who, what, target)
        assert line["result"] == response.status_code
        assert line["request_id"] == response.headers["x-request-id"]
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", line["when"])
    assert lines[3]["result"] == lines[6]["result"] == 403


@given(
    raw=st.text(alphabet="ab=&%2F+;\u00e9 0", max_size=24).map(lambda t: t.encode("latin-1")),
    cap=st.integers(min_value=1, max_value=1 << 22),
)
def test_a_pull_always_reaches_its_route_with_a_byte_budget(raw: bytes, cap: int) -> None:
    scope: dict[str, Any] = {"query_string": raw}
    _cap_max_bytes(scope, dict(query_pairs(raw)), cap)
    assert QueryParams(scope["query_string"]).get("max_bytes") is not None
