"""TLS for every connection spoolmq makes or serves: its HTTP, the HA port, etcd, the proxy's
brokers — one set of PEM files per process (``--tls-cert``, ``--tls-key``, ``--tls-ca``).

- A **server** (HTTP, the HA port) presents ``cert_file``/``key_file``. With ``ca_file`` it
  asks its clients for a certificate and refuses one the CA did not sign; HTTP takes clients
  without one (they present a token), the HA port refuses them too (its clients are brokers).
- A **client** (a slave, the proxy, etcd calls) checks the server's certificate and name
  against ``ca_file`` (the system's CAs without one) and presents its own certificate when
  the server asks for one.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path


class TlsConfigError(ValueError):
    """The certificate files are missing, unreadable or do not go together."""


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """This process's certificate, its key and the CA its peers' certificates are checked
    against (PEM files; any may be absent)."""

    cert_file: Path | None = None
    key_file: Path | None = None
    ca_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise TlsConfigError("--tls-cert and --tls-key are given together")

    @property
    def serves(self) -> bool:
        """Whether servers of this process speak TLS (a certificate was given)."""
        return self.cert_file is not None

    def server_context(self, *, require_client_cert: bool = False) -> ssl.SSLContext:
        """For a listening socket; clients presenting a certificate the CA did not sign are
        refused, and with ``require_client_cert`` those presenting none as well."""
        if self.cert_file is None or self.key_file is None:
            raise TlsConfigError("a TLS server needs --tls-cert and --tls-key")
        context = self._context(ssl.Purpose.CLIENT_AUTH)
        if self.ca_file is not None:
            context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
        return context

    def client_context(self) -> ssl.SSLContext:
        """For connections to servers: their certificate and host name checked against the
        CA (the system's CAs without one); this process's certificate presented if asked."""
        return self._context(ssl.Purpose.SERVER_AUTH)

    def _context(self, purpose: ssl.Purpose) -> ssl.SSLContext:
        """Trusting ``ca_file`` alone when given, holding this process's certificate."""
        try:
            context = ssl.create_default_context(purpose, cafile=self.ca_file)
            if self.cert_file is not None and self.key_file is not None:
                context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load the TLS files ({self}): {exc}") from None
        return context


def client_context(tls: TlsConfig | None) -> ssl.SSLContext | None:
    """A client context for ``tls``; None without TLS files (https then uses the system's
    CAs: what httpx and asyncio do by themselves)."""
    return tls.client_context() if tls is not None else None
