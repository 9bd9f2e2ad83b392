"""Where a slave finds its master: HTTP (epochs, configs) and the HA port (the CommitLog)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MasterAddress:
    """A master broker: its name, its HTTP base URL and its HA ``host:port``."""

    name: str
    http_url: str
    ha_address: str

    def __post_init__(self) -> None:
        split_host_port(self.ha_address)  # refuse a malformed address up front


def split_host_port(address: str) -> tuple[str, int]:
    """``"127.0.0.1:10912"`` as ``("127.0.0.1", 10912)``; ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)
