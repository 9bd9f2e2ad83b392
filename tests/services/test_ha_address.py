"""A master's addresses: HTTP URL and HA ``host:port``, checked when made."""

from __future__ import annotations

import pytest

from services.ha.address import MasterAddress, split_host_port


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:10912", ("127.0.0.1", 10912)),
        ("broker-a.local:0", ("broker-a.local", 0)),
        ("[::1]:10912", ("::1", 10912)),
    ],
)
def test_split_host_port(address: str, expected: tuple[str, int]) -> None:
    assert split_host_port(address) == expected


@pytest.mark.parametrize("address", ["10912", ":10912", "host:", "host:port", "host:65536"])
def test_a_malformed_address_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        split_host_port(address)
    with pytest.raises(ValueError):
        MasterAddress("m", "http://127.0.0.1:8080", address)
