"""Certificates for TLS tests, made by Debian's ``openssl`` command: a CA of the test's own and
a certificate it signed for 127.0.0.1 and localhost (for servers and, as a client certificate,
for the brokers that connect to them)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services import TlsConfig

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"
_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_LEAF_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


@dataclass(frozen=True)
class Certificates:
    """A CA and one certificate it signed (PEM files in one directory)."""

    ca: Path
    cert: Path
    key: Path

    def tls(self) -> TlsConfig:
        """What a broker or proxy given ``--tls-cert --tls-key --tls-ca`` holds."""
        return TlsConfig(self.cert, self.key, self.ca)

    def settings(self) -> dict[str, Any]:
        """The same as settings overrides (``start_server(..., **certs.settings())``)."""
        return {"tls_cert": self.cert, "tls_key": self.key, "tls_ca": self.ca}

    def client_context(self) -> ssl.SSLContext:
        """A test client trusting this CA and presenting this certificate."""
        return self.tls().client_context()


def _openssl(*args: str | Path, cwd: Path) -> None:
    subprocess.run([OPENSSL, *map(str, args)], cwd=cwd, check=True, capture_output=True)


def make_certificates(directory: Path, name: str = "spoolmq-test") -> Certificates:
    """A new CA named ``name`` and a certificate for 127.0.0.1 it signed, in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / f"{name}-ca.pem", directory / f"{name}-ca.key"
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    request, extensions = directory / f"{name}.csr", directory / f"{name}.ext"
    _openssl(
        "req", "-x509", *_KEY, "-keyout", ca_key, "-out", ca, "-days", "2",
        "-subj", f"/CN={name} CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=directory,
    )  # fmt: skip
    _openssl("req", *_KEY, "-keyout", key, "-out", request, "-subj", "/CN=127.0.0.1", cwd=directory)
    extensions.write_text(_LEAF_EXTENSIONS)
    _openssl(
        "x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", cert, "-days", "2", "-extfile", extensions,
        cwd=directory,
    )  # fmt: skip
    return Certificates(ca, cert, key)
