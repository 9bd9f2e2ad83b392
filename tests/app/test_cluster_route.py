"""The route endpoint outside a cluster (the local broker as a group of one) and the cluster
settings' checks."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from app.settings import Settings
from tests.conftest import LiveServer


def test_outside_a_cluster_the_local_broker_is_the_only_group(
    live_server: LiveServer, client: httpx.Client
) -> None:
    topic = {"read_queue_nums": 3, "write_queue_nums": 3}
    assert client.put("/v1/topics/Solo", json=topic).status_code in (200, 201)
    answer = client.get("/v1/topics/Solo/route")
    assert answer.status_code == 200
    body = answer.json()
    assert body["cluster"] is None
    assert [q["local_queue_id"] for q in body["queues"]] == [0, 1, 2]
    assert {q["group"] for q in body["queues"]} == {"broker-a"}
    [group] = body["groups"]
    assert group["master"]["name"] == "broker-a"
    assert group["master"]["http_url"] == live_server.url
    assert group["slaves"] == []


def test_route_of_an_unknown_topic_is_404_and_a_bad_name_is_400(client: httpx.Client) -> None:
    missing = client.get("/v1/topics/NoRouteHere/route")
    assert missing.status_code == 404
    assert missing.json()["code"] == "TOPIC_NOT_FOUND"
    bad = client.get("/v1/topics/bad%20name/route")
    assert bad.status_code in (400, 422)
    assert bad.headers["content-type"].startswith("application/problem+json")


def test_cluster_settings_need_etcd_and_a_fixed_ha_port(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="--etcd"):
        Settings(store_dir=tmp_path, cluster="c", ha_listen="127.0.0.1:10912")
    with pytest.raises(ValidationError, match="fixed port"):
        Settings(
            store_dir=tmp_path, cluster="c", etcd="http://127.0.0.1:2379", ha_listen="127.0.0.1:0"
        )
    with pytest.raises(ValidationError, match="http"):
        Settings(store_dir=tmp_path, cluster="c", etcd="127.0.0.1:2379", ha_listen="127.0.0.1:1")
    settings = Settings(
        store_dir=tmp_path,
        cluster="c",
        etcd="http://127.0.0.1:2379, http://127.0.0.1:22379/",
        ha_listen="127.0.0.1:10912",
        role="slave",  # no master address: the election names it
        port=9000,
    )
    config = settings.cluster_config()
    assert config is not None
    assert list(config.etcd_endpoints) == ["http://127.0.0.1:2379", "http://127.0.0.1:22379"]
    assert config.group == "broker-a"  # the broker name unless --broker-group
    assert config.http_url == "http://127.0.0.1:9000"
    assert config.lease_ttl_s == 3
    assert settings.broker_config().cluster_managed
    assert Settings(store_dir=tmp_path).cluster_config() is None


def test_admin_cluster_page_outside_a_cluster(client: httpx.Client) -> None:
    page = client.get("/admin/cluster")
    assert page.status_code == 200
    assert "not in a cluster" in page.text
    assert "Topic routes" not in page.text
