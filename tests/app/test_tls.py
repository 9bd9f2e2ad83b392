"""HTTPS on a broker (``--tls-cert``, ``--tls-key``, ``--tls-ca``), and a master and its slave
over TLS with an auth file: HTTP config sync, epochs and the HA stream all encrypted."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest

from services import TlsConfig
from tests.app.auth_support import write_auth_file
from tests.conftest import start_server, wait_until
from tests.tls_support import make_certificates


def test_https_refuses_clients_with_a_certificate_of_another_ca(tmp_path: Path) -> None:
    ours = make_certificates(tmp_path / "ours")
    theirs = make_certificates(tmp_path / "theirs", "other")
    live = start_server(tmp_path / "store", **ours.settings())
    try:
        assert live.url.startswith("https://")
        trusting = TlsConfig(ca_file=ours.ca).client_context()  # no certificate: a token's job
        assert httpx.get(f"{live.url}/healthz", verify=trusting, timeout=10).status_code == 200
        stranger = TlsConfig(theirs.cert, theirs.key, ours.ca).client_context()
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{live.url}/healthz", verify=stranger, timeout=10)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(f"{live.url}/healthz", verify=theirs.client_context(), timeout=10)
        with pytest.raises(httpx.RemoteProtocolError):  # plain HTTP to a TLS port
            httpx.get(live.url.replace("https", "http") + "/healthz", timeout=10)
    finally:
        live.stop()


def test_a_slave_follows_its_master_over_tls_with_a_token(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path / "pki")
    auth_file = tmp_path / "auth.toml"
    tokens = write_auth_file(auth_file, {"ops": {"admin": True}})
    master = start_server(
        tmp_path / "a",
        broker_name="a",
        ha_listen="127.0.0.1:0",
        auth_file=auth_file,
        **certificates.settings(),
    )
    slave = start_server(
        tmp_path / "b",
        broker_name="b",
        role="slave",
        master_http=master.url,
        master_ha=master.broker.replica.ha_address or "127.0.0.1:1",
        replication_token=tokens["ops"],
        config_sync_interval_s=0.2,
        ha_heartbeat_s=0.2,
        **certificates.settings(),
    )
    verify: ssl.SSLContext = certificates.client_context()
    admin = {"Authorization": f"Bearer {tokens['ops']}"}
    try:
        with httpx.Client(base_url=master.url, headers=admin, verify=verify, timeout=10) as http:
            sent = http.post("/v1/topics/Sealed/messages", json={"body": "private", "queue_id": 0})
            assert sent.status_code == 201, sent.text
        with httpx.Client(base_url=slave.url, verify=verify, timeout=10) as http:
            wait_until(
                lambda: (
                    [m["body"] for m in pulled(http, "/v1/topics/Sealed/queues/0/messages")]
                    == ["private"]
                )
            )
            replica = http.get("/v1/replication").json()
            assert (replica["connected"], replica["error"]) == (True, None)
    finally:
        slave.stop()
        master.stop()


def pulled(http: httpx.Client, path: str) -> list[dict[str, object]]:
    answer = http.get(path, params={"offset": 0})
    return list(answer.json().get("messages", [])) if answer.is_success else []
