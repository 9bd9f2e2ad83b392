"""Replication settings and flags: a slave needs both master addresses, addresses are checked,
and the HA port (which has no authentication) binds beyond loopback only when asked to."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.cli import build_parser, main
from app.settings import Settings
from services.ha import MasterAddress


def test_flags_make_a_slave_config(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--store-dir",
            str(tmp_path),
            "--role",
            "slave",
            "--replication",
            "sync",
            "--broker-name",
            "b-1",
            "--master-http",
            "http://127.0.0.1:8081/",
            "--master-ha",
            "127.0.0.1:10912",
            "--ha-listen",
            "127.0.0.1:0",
        ]
    )
    settings = Settings(**{k: v for k, v in vars(args).items() if k in Settings.model_fields})
    config = settings.broker_config()
    assert (config.role, config.replication, config.broker_name) == ("slave", "sync", "b-1")
    assert config.master == MasterAddress(
        "127.0.0.1:10912", "http://127.0.0.1:8081", "127.0.0.1:10912"
    )
    assert config.ha_listen == "127.0.0.1:0"


def test_environment_names_the_master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOOLMQ_ROLE", "slave")
    monkeypatch.setenv("SPOOLMQ_MASTER_HTTP", "http://127.0.0.1:9000")
    monkeypatch.setenv("SPOOLMQ_MASTER_HA", "127.0.0.1:9001")
    monkeypatch.setenv("SPOOLMQ_MASTER_NAME", "m-0")
    master = Settings().broker_config().master
    assert master == MasterAddress("m-0", "http://127.0.0.1:9000", "127.0.0.1:9001")


@pytest.mark.parametrize(
    "values",
    [
        {"role": "slave"},
        {"role": "slave", "master_http": "http://127.0.0.1:1"},
        {"role": "slave", "master_ha": "127.0.0.1:1"},
        {"ha_listen": "no-port"},
        {"ha_listen": "127.0.0.1:99999"},
        {"master_ha": "127.0.0.1:x"},
        {"master_http": "ftp://127.0.0.1"},
        {"broker_name": "has space"},
        {"replication": "semi"},
        {"replication": "sync"},  # without an HA port no slave can ever be in sync
    ],
)
def test_invalid_replication_settings(values: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        Settings(**values)  # type: ignore[arg-type]


def test_master_by_default() -> None:
    config = Settings().broker_config()
    assert (config.role, config.replication, config.master, config.ha_listen) == (
        "master",
        "async",
        None,
        None,
    )


def test_ha_port_beyond_loopback_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--store-dir", str(tmp_path), "--ha-listen", "0.0.0.0:0"])
    assert code == 2
    assert "loopback" in capsys.readouterr().err
    assert not (tmp_path / "commitlog").exists()
