"""A cluster with TLS everywhere: etcd over https (its ``--cert-file``, ``--key-file`` and
``--trusted-ca-file``: clients show a certificate of the CA), the brokers' HTTP and HA ports
over TLS (``spoolmq serve`` processes with ``--tls-cert``, ``--tls-key``, ``--tls-ca``), and
the proxy in front of them, over https too."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from app.proxy.context import ProxyLimits
from tests.app.cluster_support import ClusterBroker
from tests.app.proxy.support import start_proxy
from tests.conftest import wait_until
from tests.etcd_support import start_etcd
from tests.tls_support import make_certificates


def test_a_tls_cluster_replicates_fails_over_and_serves_through_the_proxy(
    tmp_path: Path,
) -> None:
    certificates = make_certificates(tmp_path / "pki")
    etcd = start_etcd(tmp_path, certificates)
    assert etcd.url.startswith("https://")
    a = ClusterBroker("a", tmp_path / "a", etcd.url, certificates=certificates)
    b = ClusterBroker("b", tmp_path / "b", etcd.url, certificates=certificates)
    proxy = None
    try:
        a.start()
        b.start()  # finds a's master key and follows it, over TLS
        wait_until(lambda: b.replica()["connected"] and b.replica()["error"] is None, timeout=30)
        # https to its clients; brokers and etcd checked against the CA, its certificate shown
        proxy = start_proxy(etcd.url, cluster="test", limits=ProxyLimits(tls=certificates.tls()))
        assert proxy.url.startswith("https://")
        verify = certificates.client_context()
        with httpx.Client(base_url=proxy.url, timeout=40, verify=verify) as http:
            wait_until(lambda: http.get("/healthz").json()["masters"] == {"g1": "a"}, timeout=30)
            assert http.put("/v1/topics/Safe", json={"write_queue_nums": 1}).status_code == 201
            sent = http.post("/v1/topics/Safe/messages", json={"body": "before"})
            assert sent.json()["messages"][0]["status"] == "PUT_OK", sent.text  # b has it
            a.kill()  # kill -9: a's lease lapses, b is elected
            wait_until(lambda: b.role() == "master", timeout=30)
            for _ in range(300):  # until the proxy hears of the new master from etcd
                sent = http.post("/v1/topics/Safe/messages", json={"body": "after"})
                if sent.status_code == 201:
                    break
                assert sent.status_code in (421, 502, 503), sent.text
                time.sleep(0.1)
            assert sent.status_code == 201, sent.text
            pulled = http.get("/v1/topics/Safe/queues/0/messages", params={"offset": 0})
            assert [m["body"] for m in pulled.json()["messages"]] == ["before", "after"]
    finally:
        if proxy is not None:
            proxy.stop()
        b.stop()
        a.stop()
        etcd.stop()
