"""The proxy's own OpenAPI document (:mod:`app.proxy.openapi`): served with Swagger UI and ReDoc
from the vendored files, describing exactly the proxy's routes, their cluster-wide answers and
the problem codes the proxy adds — and honoured by a live proxy in front of two broker groups,
as schemathesis checks it."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute

from app.problem_codes import PROBLEM_CODES_KEY, PROXY_CODES
from app.proxy.main import create_proxy_app
from app.proxy.schemas import BODY_MODELS
from tests.app.proxy.support import Cluster, create_topic, is_problem, two_groups
from tests.app.schemathesis_support import SCHEMA_CANNOT_SAY, generated_sdk, run_schemathesis

ROOT = Path(__file__).resolve().parents[3]
BROKER_DOCUMENT = ROOT / "openapi" / "openapi.json"
PROXY_DOCUMENT = ROOT / "openapi" / "proxy.json"
EXPORT_SCRIPT = ROOT / "scripts" / "export_openapi.py"
BIN = Path(sys.executable).parent


POP_OPERATIONS = frozenset({"receiveMessages", "ackMessages", "changeInvisibility"})
"""The POP routes (app/proxy/pop.py), whose declarations are finished with the POP receive."""


def operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every operation of a document by operationId, with its method and path."""
    return {
        operation["operationId"]: {"method": method, "path": path, **operation}
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    app = create_proxy_app("c1", ["http://127.0.0.1:1"])
    return app.openapi()


def test_the_document_has_the_proxys_routes_and_nothing_else(document: dict[str, Any]) -> None:
    app = create_proxy_app("c1", ["http://127.0.0.1:1"])
    served = {
        (method.lower(), route.path)
        for route in app.routes
        if isinstance(route, APIRoute) and route.include_in_schema
        for method in route.methods or ()
    }
    documented = {(op["method"], op["path"]) for op in operations(document).values()}
    assert documented == served
    # a route the proxy does not have is not in it: those of one broker alone
    for absent in ("/readyz", "/metrics", "/v1/timers", "/v1/groups/{group}/dlq"):
        assert absent not in document["paths"]


def test_each_operation_is_the_brokers_operation_of_its_path(document: dict[str, Any]) -> None:
    """Same operationId for the same method and path: a client generated from either
    document calls the operation by one name."""
    broker = json.loads(BROKER_DOCUMENT.read_text())
    brokers = {(op["method"], op["path"]): name for name, op in operations(broker).items()}
    for name, operation in operations(document).items():
        assert brokers[(operation["method"], operation["path"])] == name
        assert operation["summary"], name
        assert operation.get("tags") or name in POP_OPERATIONS, name


def test_the_proxys_own_codes_are_declared_per_operation(document: dict[str, Any]) -> None:
    ops = operations(document)
    send = ops["sendMessages"]["responses"]
    assert send["504"][PROBLEM_CODES_KEY] == ["OUTCOME_UNKNOWN"]
    assert "BROKER_UNAVAILABLE" in send["503"][PROBLEM_CODES_KEY]
    assert "Retry-After" in send["503"]["headers"]
    assert "NO_MASTER" in send["503"][PROBLEM_CODES_KEY]
    put_topic = ops["putTopic"]["responses"]
    assert "ROUTE_CONFLICT" in put_topic["409"][PROBLEM_CODES_KEY]
    assert "ETCD_UNAVAILABLE" in put_topic["503"][PROBLEM_CODES_KEY]
    assert put_topic["502"][PROBLEM_CODES_KEY] == ["ETCD_ERROR"]
    for operation_id, codes in PROXY_CODES.items():
        declared = {
            c for r in ops[operation_id]["responses"].values() for c in r.get(PROBLEM_CODES_KEY, ())
        }
        assert set(codes) <= declared, operation_id
    # the proxy adds nothing to what a lookup answers
    assert "504" not in ops["getMessage"]["responses"]
    assert "409" not in ops["getTopicRoute"]["responses"]


def test_answers_name_their_broker_group_and_queue_ids_are_cluster_wide(
    document: dict[str, Any],
) -> None:
    schemas = document["components"]["schemas"]

    def answer(operation_id: str, status: str = "200") -> dict[str, Any]:
        ref = operations(document)[operation_id]["responses"][status]["content"][
            "application/json"
        ]["schema"]["$ref"]
        return dict(schemas[ref.rsplit("/", 1)[1]])

    assert "broker_group" in answer("sendMessages", "201")["required"]
    pulled = answer("pullGroupMessages")["properties"]
    for part in ("messages", "queues"):
        item = schemas[pulled[part]["items"]["$ref"].rsplit("/", 1)[1]]
        assert "broker_group" in item["required"], part
    assert "broker_group" in answer("sendHalfMessage", "201")["required"]
    assert "broker_group" in answer("cancelTimer")["required"]
    route = answer("getTopicRoute")["properties"]["queues"]["items"]["$ref"]
    assert set(schemas[route.rsplit("/", 1)[1]]["required"]) == {
        "queue_id",
        "group",
        "local_queue_id",
    }
    queue_id = next(
        p for p in operations(document)["pullMessages"]["parameters"] if p["name"] == "queue_id"
    )
    assert "exclusiveMaximum" not in queue_id["schema"]  # not the broker's 1024
    assert "ProxyHealthOut" in answer("healthz")["title"]


def test_forwarded_bodies_declare_the_brokers_models(document: dict[str, Any]) -> None:
    ops = operations(document)
    bodies = {
        name: op["requestBody"]["content"]["application/json"]["schema"]
        for name, op in ops.items()
        if "requestBody" in op
    }
    assert bodies["putGroup"] == {"$ref": "#/components/schemas/GroupIn"}
    assert bodies["commitOffset"] == {"$ref": "#/components/schemas/OffsetCommitIn"}
    assert bodies["commitTransaction"] == {"$ref": "#/components/schemas/EndIn"}
    assert "oneOf" in bodies["sendMessages"]
    assert "application/octet-stream" in ops["sendMessages"]["requestBody"]["content"]
    for model in BODY_MODELS:
        assert model.__name__ in document["components"]["schemas"]
    text = json.dumps(document)
    refs = set(re.findall(r"#/components/schemas/(\w+)", text))
    assert refs <= set(document["components"]["schemas"])
    raw_send = {p["name"] for p in ops["sendMessages"]["parameters"]}
    assert {"tags", "keys", "property", "queue_id", "sharding_key", "Idempotency-Key"} <= raw_send
    assert {p["name"] for p in ops["pullGroupMessages"]["parameters"]} >= {
        "group",
        "topic",
        "max_messages",
        "wait_ms",
        "auto_commit",
    }


# ================================================================ served by a live proxy


def test_the_proxy_serves_its_document_and_the_doc_pages(cluster: Cluster) -> None:
    http = cluster.http
    served = http.get("/openapi.json")
    assert served.status_code == 200
    assert served.json()["info"]["title"] == "spoolmq proxy"
    assert "sendMessages" in served.text
    for page, marker in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
        answer = http.get(page)
        assert answer.status_code == 200 and marker in answer.text, page
        assert "cdn" not in answer.text.lower(), page
    assert http.get("/static/swagger-ui/swagger-ui-bundle.js").status_code == 200
    assert http.get("/favicon.ico").headers["content-type"] == "image/svg+xml"


def test_a_route_the_proxy_does_not_have_is_404_as_documented(cluster: Cluster) -> None:
    is_problem(cluster.http.get("/v1/timers"), 404, "ROUTE_NOT_FOUND")
    create_topic(cluster.http, "Ends", 2)
    other = cluster.http.post("/v1/transactions/g1~x/abort", json={"producer_group": "P"})
    is_problem(other, 404, "ROUTE_NOT_FOUND")


@pytest.fixture
def fuzzed(tmp_path: Path) -> Iterator[Cluster]:
    """Two broker groups whose long-polls are cut to 50 ms (generated wait_ms values would
    stretch the run), and a topic over both for the operations to find."""
    for cluster in two_groups(tmp_path, long_poll_max_ms=50):
        create_topic(cluster.http, "Fuzzed", 4)
        yield cluster


PROXY_CANNOT_SAY: dict[str, tuple[tuple[str, ...], str]] = {
    "putTopic": (
        ("422",),
        "`groups` names broker groups of the cluster, and `write_queue_nums` is at most 1024 "
        "per hosting group: a document cannot know the groups of a cluster (VALIDATION_FAILED)",
    ),
    "sendHalfMessage": (
        ("422",),
        "the delay levels are the brokers' table (`--message-delay-levels`), which a proxy's "
        "document cannot know; the broker's own document gives its table's size "
        "(INVALID_PROPERTY)",
    ),
}
"""The proxy's operations whose valid-looking requests may be refused for what its document
cannot say, besides the brokers' own (:data:`tests.app.schemathesis_support.SCHEMA_CANNOT_SAY`,
to which they are added)."""


def test_schemathesis_finds_no_server_errors_no_schema_violations_and_no_refused_valid_data(
    fuzzed: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for operation_id, (statuses, reason) in PROXY_CANNOT_SAY.items():
        brokers, why = SCHEMA_CANNOT_SAY.get(operation_id, ((), ""))
        exception = ((*brokers, *statuses), f"{why}; {reason}" if why else reason)
        monkeypatch.setitem(SCHEMA_CANNOT_SAY, operation_id, exception)
    schema = tmp_path / "proxy.json"
    schema.write_text(json.dumps(fuzzed.http.get("/openapi.json").json()))
    result = run_schemathesis(
        schema,
        fuzzed.proxy.url,
        tmp_path,
        seed=45,
        max_examples=10,
        # Above the proxy's wait for a broker (10 s past a long-poll), with room to spare.
        request_timeout_s=60,
    )
    assert result.returncode == 0, result.stdout[-8000:] + result.stderr[-2000:]
    assert " passed" in result.stdout


# ================================================================ the committed document, an SDK


def test_the_committed_proxy_document_is_the_proxys() -> None:
    """openapi/proxy.json is what scripts/export_openapi.py writes for the proxy now (its
    ``--check`` checks it with the broker's: tests/app/test_openapi.py)."""
    spec = importlib.util.spec_from_file_location("export_openapi", EXPORT_SCRIPT)
    assert spec is not None and spec.loader is not None
    export = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(export)
    assert PROXY_DOCUMENT.read_text() == export.render_proxy(), "run scripts/export_openapi.py"


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Python client generated from openapi/proxy.json, importable as spoolmq_proxy_sdk."""
    root = tmp_path_factory.mktemp("proxy-sdk")
    with generated_sdk(PROXY_DOCUMENT, "spoolmq_proxy_sdk", root) as module:
        yield module


def test_a_generated_client_sends_pulls_and_commits_through_the_proxy(
    sdk: Any, cluster: Cluster
) -> None:
    def api(name: str) -> Any:
        return importlib.import_module(f"spoolmq_proxy_sdk.api.{name}")

    models = importlib.import_module("spoolmq_proxy_sdk.models")
    with sdk.Client(base_url=cluster.proxy.url, raise_on_unexpected_status=True) as client:
        route = api("topics.put_topic").sync(
            "SdkProxied", client=client, body=models.ClusterTopicIn(write_queue_nums=4)
        )
        assert isinstance(route, models.ClusterTopicRouteOut)
        assert [q.group for q in route.queues] == ["g1", "g1", "g2", "g2"]
        sent = api("messages.send_messages").sync(
            "SdkProxied", client=client, body=models.SendMessage(body="via sdk", queue_id=3)
        )
        assert isinstance(sent, models.ClusterSendResponse)
        assert (sent.broker_group, sent.messages[0].queue_id) == ("g2", 3)

        pulled = api("groups.pull_group_messages").sync(
            "sdk-g", "SdkProxied", client=client, wait_ms=1000
        )
        assert isinstance(pulled, models.ClusterGroupPullResponse)
        assert [(m.body, m.broker_group) for m in pulled.messages] == [("via sdk", "g2")]
        queue = next(q for q in pulled.queues if q.queue_id == 3)
        item = models.ClusterOffsetCommitItem(
            topic="SdkProxied", queue_id=3, offset=queue.next_offset
        )
        committed = api("groups.commit_offsets").sync(
            "sdk-g", client=client, body=models.ClusterOffsetBatchIn(offsets=[item])
        )
        assert isinstance(committed, models.ClusterOffsetCommitResponse)

        half = api("transactions.send_half_message").sync(
            "SdkProxied",
            client=client,
            body=models.TransactionSendIn(
                producer_group="sdk-p", message=models.SendMessage(body="half")
            ),
        )
        assert isinstance(half, models.ClusterTransactionOut)
        ended = api("transactions.commit_transaction").sync(
            half.transaction_id, client=client, body=models.EndIn(producer_group="sdk-p")
        )
        assert isinstance(ended, models.ClusterEndOut)
        assert ended.broker_group == half.broker_group

        missing = api("topics.get_topic_route").sync("NoSuchSdkTopic", client=client)
        assert isinstance(missing, models.Problem)
        assert missing.code == "TOPIC_NOT_FOUND"
