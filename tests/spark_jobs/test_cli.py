"""cli: ``spoolmq-spark`` with its commands; a bad option is a usage error (exit 2)."""

from __future__ import annotations

import pytest

from spark_jobs import cli


def test_both_commands_are_there_with_their_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["--help"])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "replay" in printed and "lag-report" in printed and "latency" in printed
    with pytest.raises(SystemExit) as done:
        cli.main(["lag-report", "--help"])
    assert done.value.code == 0 and "--store" in capsys.readouterr().out


def test_an_option_that_cannot_be_used_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["replay", "--store", "/nowhere", "--to", "s3://bucket"])
    assert done.value.code == 2
    assert "spoolmq-spark" in capsys.readouterr().err


def test_latency_needs_a_store_or_a_broker(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["latency", "--out", "report-out"])
    assert done.value.code == 2
    assert "--store DIR or --broker URL" in capsys.readouterr().err
