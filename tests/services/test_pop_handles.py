"""Receipt handles: signed by the store's secret, kept across restarts, copied to slaves."""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from services.errors import InvalidReceiptHandleError
from services.pop.handles import (
    MAX_HANDLE_LENGTH,
    SECRET_FILE,
    HandleCodec,
    ReceiptHandle,
    adopt_secret,
    secret_text,
)

HANDLE = ReceiptHandle("g", "Orders", 3, 42, "ab12cd34ef56ab78", 1_700_000_000_000)


def test_the_secret_is_made_once_private_and_kept(tmp_path: Path) -> None:
    assert secret_text(tmp_path) is None
    text = HandleCodec.for_config_dir(tmp_path).encode(HANDLE)
    secret = secret_text(tmp_path)
    assert secret is not None and len(bytes.fromhex(secret)) == 32
    assert stat.S_IMODE((tmp_path / SECRET_FILE).stat().st_mode) == 0o600
    assert HandleCodec.for_config_dir(tmp_path).decode(text) == HANDLE
    assert secret_text(tmp_path) == secret


@pytest.mark.parametrize(
    "forge",
    [
        lambda t: t.replace(".", ".A" if ".A" not in t else ".B", 1)[:-1],  # another MAC
        lambda t: "x" + t,  # another payload
        lambda t: t.replace(".", ""),  # no MAC at all
        lambda t: "é" + t,  # not base64url
        lambda t: "",
        lambda t: "a" * (MAX_HANDLE_LENGTH + 1),
    ],
)
def test_a_handle_not_issued_here_is_refused(tmp_path: Path, forge: Callable[[str], str]) -> None:
    codec = HandleCodec.for_config_dir(tmp_path)
    with pytest.raises(InvalidReceiptHandleError):
        codec.decode(forge(codec.encode(HANDLE)))


def test_a_slave_that_adopts_the_secret_reads_the_masters_handles(tmp_path: Path) -> None:
    master, slave = tmp_path / "master", tmp_path / "slave"
    text = HandleCodec.for_config_dir(master).encode(HANDLE)
    HandleCodec.for_config_dir(slave)  # a secret of its own first
    with pytest.raises(InvalidReceiptHandleError):
        HandleCodec.for_config_dir(slave).decode(text)
    adopt_secret(slave, secret_text(master) or "")
    assert HandleCodec.for_config_dir(slave).decode(text) == HANDLE
    with pytest.raises(ValueError):
        adopt_secret(slave, "not hex")
