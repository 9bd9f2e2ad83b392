"""The certificate files of a process, and the contexts its servers and clients use."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from services import TlsConfig, TlsConfigError
from tests.tls_support import make_certificates


def test_a_certificate_goes_with_its_key(tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match="together"):
        TlsConfig(cert_file=tmp_path / "cert.pem")
    assert not TlsConfig(ca_file=tmp_path / "ca.pem").serves


def test_files_that_cannot_be_loaded_are_named(tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match=r"missing\.pem"):
        TlsConfig(ca_file=tmp_path / "missing.pem").client_context()
    with pytest.raises(TlsConfigError, match="needs --tls-cert"):
        TlsConfig(ca_file=tmp_path / "missing.pem").server_context()


def test_servers_check_client_certificates_against_the_ca(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path)
    tls = certificates.tls()
    assert tls.server_context().verify_mode == ssl.CERT_OPTIONAL  # HTTP: a token will do
    assert tls.server_context(require_client_cert=True).verify_mode == ssl.CERT_REQUIRED  # HA
    assert TlsConfig(certificates.cert, certificates.key).server_context().verify_mode == (
        ssl.CERT_NONE
    )
    client = tls.client_context()
    assert (client.verify_mode, client.check_hostname) == (ssl.CERT_REQUIRED, True)
    # the CA given, and no other: the system's CAs are not trusted besides it
    assert [c["subject"] for c in client.get_ca_certs()] == [
        ((("commonName", "spoolmq-test CA"),),)
    ]
