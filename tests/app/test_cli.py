"""The ``spoolmq serve`` console script: flags and env, a real process, graceful SIGTERM; and
``spoolmq proxy``: the cluster named in etcd, served, and its refusals to start."""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.cli import base_url, build_parser, main
from app.settings import SETTING_SECTIONS, Settings
from services import StoreConfig
from storage import MessageStore
from tests.etcd_support import start_etcd
from tests.net import free_port

BIN = Path(sys.executable).parent


def test_every_setting_is_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    help_text = capsys.readouterr().out
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in help_text
    assert "SPOOLMQ_COMMIT_LOG_FILE_SIZE" in help_text


def test_serve_help_lists_the_flags_by_section(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: spoolmq serve [--FLAG VALUE ...]\n")
    headings = [
        line[:-1] for line in help_text.splitlines() if re.fullmatch(r"[A-Za-z][\w ]+:", line)
    ]
    assert headings == ["options", *SETTING_SECTIONS.values()]
    store = help_text.split("\nstore sizes and limits:\n", 1)[1].split("\n\n", 1)[0]
    assert "--commit-log-file-size" in store and "--port" not in store
    assert next(iter(Settings.model_fields)) in SETTING_SECTIONS, (
        "the first setting opens a section"
    )


def flag_helps(help_text: str) -> dict[str, str]:
    """Each flag of a --help output and its help, on one line (argparse wraps it)."""
    helps: dict[str, list[str]] = {}
    entry: list[str] = []
    for line in help_text.splitlines():
        started = re.match(r"  (--[a-z0-9-]+)", line)
        if started:
            entry = helps.setdefault(started[1], [])
        elif not line.startswith(" "):
            entry = []  # a section heading or a blank line ends an entry
        entry.append(line)
    return {flag: " ".join(" ".join(lines).split()) for flag, lines in helps.items()}


SHOWN_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "max_length": "length <="}


def test_serve_help_states_the_allowed_range_of_every_bounded_flag() -> None:
    result = subprocess.run(
        [str(BIN / "spoolmq"), "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    helps = flag_helps(result.stdout)
    bounded = 0
    for name, field in Settings.model_fields.items():
        shown = helps["--" + name.replace("_", "-")]
        for rule in field.metadata:
            if getattr(rule, "pattern", None) is not None:
                continue  # a format, not a range
            found = [(k, getattr(rule, k)) for k in SHOWN_BOUNDS if hasattr(rule, k)]
            assert len(found) == 1, f"{name}: {rule!r} is no bound --help knows"
            [(kind, value)] = found
            assert f"{SHOWN_BOUNDS[kind]} {value}" in shown, f"{name}: {shown}"
            bounded += 1
    assert bounded > 50
    assert "(allowed >= 10, <= 95; env" in helps["--disk-max-used-space-ratio"]
    assert "(allowed >= 10, <= 100; env" in helps["--disk-space-clean-forcibly-ratio"]
    assert (
        "(allowed > 0; env SPOOLMQ_FILE_RESERVED_TIME_HOURS" in helps["--file-reserved-time-hours"]
    )
    assert "allowed" not in helps["--store-dir"]  # unbounded: no range


def test_retention_below_the_timer_roll_window_is_refused_only_with_timers_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["serve", "--store-dir", str(tmp_path), "--file-reserved-time-hours", "24"]
    assert main(flags) == 2  # the roll window is 48 h: a timed record would expire first
    assert "the timer roll window (172800 s) must be shorter than" in capsys.readouterr().err
    args = build_parser().parse_args([*flags, "--no-timer-enabled"])
    settings = Settings(**{k: v for k, v in vars(args).items() if k in Settings.model_fields})
    assert (settings.file_reserved_time_hours, settings.timer_enabled) == (24, False)


def test_every_store_size_and_limit_is_a_setting() -> None:
    settings = Settings.model_construct()
    store = StoreConfig()
    for config in (store, store.retention):
        for field in dataclasses.fields(config):
            if field.name in ("store_host", "flush_disk_type", "retention", "timer"):
                continue
            assert field.name in Settings.model_fields, f"no setting for {field.name}"
            assert getattr(settings, field.name) == getattr(config, field.name), field.name
    # The timer's: what an operator chooses; the wheel's geometry stays RocketMQ's.
    for name in ("enabled", "precision_ms", "max_delay_s"):
        assert getattr(settings, f"timer_{name}") == getattr(store.timer, name), name
    assert settings.store_config() == StoreConfig()


def test_flags_win_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPOOLMQ_MAX_PARKED_PULLS", "7")
    monkeypatch.setenv("SPOOLMQ_PORT", "9999")
    args = build_parser().parse_args(
        ["serve", "--port", "1234", "--flush", "sync", "--no-auto-create-topics"]
    )
    given = {k: v for k, v in vars(args).items() if k in Settings.model_fields}
    settings = Settings(**given)
    assert (settings.port, settings.max_parked_pulls, settings.flush) == (1234, 7, "sync")
    assert settings.auto_create_topics is False
    assert settings.store_config().flush_disk_type.value == "sync"


def test_serve_process_shuts_down_gracefully_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    store = tmp_path / "data"
    env = {**os.environ, "SPOOLMQ_COMMIT_LOG_FILE_SIZE": str(4 * 1024 * 1024)}
    process = subprocess.Popen(
        [
            str(BIN / "spoolmq"),
            "serve",
            "--store-dir",
            str(store),
            "--port",
            str(port),
            "--consume-queue-units-per-file",
            "1000",
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        with httpx.Client(base_url=url, timeout=40) as client:
            assert (
                client.post(
                    "/v1/topics/Cli/messages", json={"body": "x", "queue_id": 0}
                ).status_code
                == 201
            )
            assert (
                client.put(
                    "/v1/groups/cli/topics/Cli/queues/0/offset", json={"offset": 1}
                ).status_code
                == 200
            )
            assert (store / "abort").exists()
            result: list[httpx.Response] = []
            poll = threading.Thread(
                target=lambda: result.append(
                    client.get(
                        "/v1/topics/Cli/queues/0/messages", params={"offset": 1, "wait_ms": 30_000}
                    )
                )
            )
            poll.start()
            deadline = time.monotonic() + 30
            while "spoolmq_long_polls_parked 1" not in client.get("/metrics").text:
                assert time.monotonic() < deadline, "the pull did not park"
                time.sleep(0.02)
            process.send_signal(signal.SIGTERM)
            poll.join(30)
        assert process.wait(timeout=30) == 0
        assert result[0].status_code == 200 and result[0].json()["messages"] == []
        assert not (store / "abort").exists()
        assert '"Cli@cli"' in (store / "config" / "consumerOffset.json").read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_second_process_on_the_same_store_exits_with_a_message(tmp_path: Path) -> None:
    store = tmp_path / "locked"
    first = subprocess.Popen(
        [
            str(BIN / "spoolmq"),
            "serve",
            "--store-dir",
            str(store),
            "--port",
            str(free_port()),
            "--commit-log-file-size",
            str(1024 * 1024),
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (store / "abort").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        second = subprocess.run(
            [
                str(BIN / "spoolmq"),
                "serve",
                "--store-dir",
                str(store),
                "--port",
                str(free_port()),
                "--log-level",
                "critical",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 1
        assert "in use by another process" in second.stderr
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == 0


def test_demo_sends_and_pulls_through_the_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPOOLMQ_COMMIT_LOG_FILE_SIZE", str(1024 * 1024))
    store = tmp_path / "demo"
    assert main(["demo", "--store-dir", str(store)]) == 0
    first = capsys.readouterr().out
    assert first.count("sent ") == 3
    assert "pulled 3 messages: FOUND, next 3" in first
    assert main(["demo", "--store-dir", str(store)]) == 0
    assert "pulled 6 messages: FOUND, next 6" in capsys.readouterr().out
    assert '"DemoTopic"' in (store / "config" / "topics.json").read_text()
    assert not (store / "abort").exists(), "closed cleanly"


def test_demo_on_a_store_in_use_fails_with_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SPOOLMQ_COMMIT_LOG_FILE_SIZE", str(1024 * 1024))
    config = StoreConfig(commit_log_file_size=1024 * 1024)
    with MessageStore.open(tmp_path / "busy", config):
        assert main(["demo", "--store-dir", str(tmp_path / "busy")]) == 1
    assert "in use by another process" in capsys.readouterr().err


def test_a_busy_port_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [str(BIN / "spoolmq"), "serve", "--store-dir", str(tmp_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2
    assert result.stderr == (
        f"spoolmq: cannot listen on 127.0.0.1:{port}: the port is in use (another server? "
        "choose another with --port or SPOOLMQ_PORT)\n"
    )
    assert not (tmp_path / "commitlog").exists(), "nothing opened before the port is known"


def test_proxy_command_serves_the_cluster_route_table(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    port = free_port()
    command = ["proxy", "--cluster", "c9", "--etcd", etcd.url, "--port", str(port)]
    command += ["--workers", "1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        health = None
        while health is None:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
            except httpx.TransportError:
                assert process.poll() is None, "the proxy exited"
                assert time.monotonic() < deadline, "the proxy did not start"
                time.sleep(0.05)
        assert (health["status"], health["cluster"]) == ("ok", "c9")
        missing = httpx.get(f"http://127.0.0.1:{port}/v1/topics/T/route", timeout=5)
        assert (missing.status_code, missing.json()["code"]) == (404, "TOPIC_NOT_FOUND")
    finally:
        process.terminate()
        process.wait(timeout=30)
        etcd.stop()


def test_proxy_command_refuses_to_listen_beyond_loopback_unless_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["proxy", "--cluster", "c", "--etcd", "http://127.0.0.1:1", "--host", "0.0.0.0"]
    assert main(argv) == 2
    assert "--allow-anonymous" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "proxy"])
def test_a_grpc_port_beyond_loopback_needs_authentication_or_asking(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--store-dir", str(tmp_path)] if command == "serve" else []
    if command == "proxy":
        argv = ["--cluster", "c", "--etcd", "http://127.0.0.1:1"]
    assert main([command, *argv, "--grpc-listen", "0.0.0.0:0"]) == 2
    assert "--allow-anonymous" in capsys.readouterr().err


def test_proxy_command_refuses_tls_files_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["proxy", "--cluster", "c", "--etcd", "https://127.0.0.1:1"]
    assert main([*argv, "--tls-cert", str(tmp_path / "cert.pem")]) == 2
    assert "--tls-cert and --tls-key are given together" in capsys.readouterr().err
    assert main([*argv, "--tls-ca", str(tmp_path / "missing.pem")]) == 2
    assert "cannot load the TLS files" in capsys.readouterr().err


def test_proxy_command_refuses_a_busy_port_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["proxy", "--cluster", "c", "--etcd", "http://127.0.0.1:1", "--port", str(port)]
        assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"spoolmq: cannot listen on 127.0.0.1:{port}: the port is in use (another server? "
        "choose another with --port)\n"
    )


def test_serve_logs_where_it_serves_the_api_the_admin_pages_and_the_docs(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "SPOOLMQ_COMMIT_LOG_FILE_SIZE": str(4 * 1024 * 1024)}
    command = [str(BIN / "spoolmq"), "serve", "--store-dir", str(tmp_path / "data")]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--log-level", "info"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines: list[str] = []
        # bounded: the line comes before the first request is served
        while len(lines) < 200 and (line := process.stderr.readline()):
            lines.append(line)
            if "serving on" in line:
                break
        url = f"http://127.0.0.1:{port}"
        assert (
            f"serving on {url}: admin pages at {url}/admin, API docs at {url}/docs" in (lines[-1])
        ), lines
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8080"),
        ("0.0.0.0", "http://127.0.0.1:8080"),
        ("::", "http://[::1]:8080"),
        ("::1", "http://[::1]:8080"),
        ("broker.example", "http://broker.example:8080"),
    ],
)
def test_the_logged_url_is_one_a_local_browser_opens(host: str, url: str) -> None:
    assert base_url(host, 8080) == url
