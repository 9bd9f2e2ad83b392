"""A smoke test of an installed spoolmq: serve, send, pull, and a proxy in front.

``make lowest-deps`` installs the project with the lowest versions its dependencies allow
(``uv pip install --resolution lowest-direct``) into a scratch venv and runs this with that
venv's ``bin`` directory, so the declared lower bounds are ones that work. It starts a real
etcd (Debian's ``etcd-server``), one broker in cluster mode and a proxy, all on 127.0.0.1,
drives them with the standard library's HTTP client, and stops them (by their PIDs). A step
that fails says which and exits 1.

    .venv-lowest/bin/python scripts/smoke_test.py .venv-lowest/bin
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
CLUSTER = "smoke"


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1, each held until all are picked (none picked twice)."""
    held = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def call(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    """The JSON answer to a request; an HTTP error is raised with its body."""
    data = None
    sent = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            content = answer.read()
    except urllib.error.HTTPError as exc:
        raise AssertionError(f"{method} {url}: {exc.code} {exc.read()[:500]!r}") from None
    return json.loads(content) if content else None


def wait_for(url: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer 200 in {seconds:g} s")
        time.sleep(0.1)


@contextlib.contextmanager
def process(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``command``; at the end stop it (SIGTERM, then SIGKILL) and require a clean exit
    from a spoolmq command."""
    with log.open("wb") as out:
        started = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield started
    finally:
        started.terminate()
        try:
            code = started.wait(timeout=30)
        except subprocess.TimeoutExpired:
            started.kill()
            started.wait()
            raise AssertionError(f"{command[0]} did not stop on SIGTERM (log: {log})") from None
        if "spoolmq" in Path(command[0]).name and code != 0:
            raise AssertionError(f"{' '.join(command[:2])} exited {code}: {log.read_text()}")


def smoke(bin_dir: Path, work: Path) -> None:
    etcd_port, peer_port, broker_port, ha_port, proxy_port = free_ports(5)
    etcd = f"http://127.0.0.1:{etcd_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    broker = f"http://127.0.0.1:{broker_port}"
    proxy = f"http://127.0.0.1:{proxy_port}"
    etcd_command = [
        ETCD, "--name=smoke", f"--data-dir={work / 'etcd'}",
        f"--listen-client-urls={etcd}", f"--advertise-client-urls={etcd}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=smoke={peer}", "--log-level=error",
    ]  # fmt: skip
    serve = [
        str(bin_dir / "spoolmq"), "serve", "--store-dir", str(work / "store"),
        "--port", str(broker_port), "--cluster", CLUSTER, "--etcd", etcd,
        "--broker-group", "g1", "--ha-listen", f"127.0.0.1:{ha_port}", "--log-level", "warning",
    ]  # fmt: skip
    front = [
        str(bin_dir / "spoolmq"), "proxy", "--cluster", CLUSTER, "--etcd", etcd,
        "--port", str(proxy_port), "--log-level", "warning",
    ]  # fmt: skip
    with process(etcd_command, work / "etcd.log"):
        wait_for(f"{etcd}/health")
        with process(serve, work / "serve.log"):
            wait_for(f"{broker}/readyz")
            with process(front, work / "proxy.log"):
                wait_for(f"{proxy}/healthz")
                _through(broker, proxy)


def _through(broker: str, proxy: str) -> None:
    step("a topic through the proxy")
    deadline = time.monotonic() + 30
    while not call("GET", f"{proxy}/healthz")["masters"].get("g1"):
        assert time.monotonic() < deadline, "the proxy never saw the broker's group"
        time.sleep(0.1)
    call("PUT", f"{proxy}/v1/topics/Smoke", {"write_queue_nums": 2})

    step("a send, a keyed batch and a raw body")
    one = call("POST", f"{proxy}/v1/topics/Smoke/messages", {"body": "one", "queue_id": 0})
    assert one["broker_group"] == "g1" and one["messages"][0]["queue_id"] == 0, one
    batch = {"messages": [{"body": f"b{i}"} for i in range(3)], "queue_id": 0}
    keyed = {"Idempotency-Key": "smoke-1"}
    first = call("POST", f"{proxy}/v1/topics/Smoke/messages", batch, keyed)
    again = call("POST", f"{proxy}/v1/topics/Smoke/messages", batch, keyed)
    assert [m["msg_id"] for m in again["messages"]] == [m["msg_id"] for m in first["messages"]]
    raw = call(
        "POST",
        f"{broker}/v1/topics/Smoke/messages?queue_id=0&tags=R",
        b"raw \x00 body",
        {"Content-Type": "application/octet-stream"},
    )
    assert raw["messages"][0]["queue_offset"] == 4, raw

    step("pulls through the proxy and from the broker")
    pulled = call("GET", f"{proxy}/v1/topics/Smoke/queues/0/messages?offset=0")
    bodies = [m["body"] for m in pulled["messages"]]
    assert bodies[:4] == ["one", "b0", "b1", "b2"] and pulled["next_offset"] == 5, pulled
    direct = call("GET", f"{broker}/v1/topics/Smoke/queues/0/messages?offset=4&tags=R")
    assert direct["messages"][0]["tags"] == "R", direct

    step("a group pull and a POP receive through the proxy")
    group = call("GET", f"{proxy}/v1/groups/G/topics/Smoke/messages?max_messages=10")
    assert len(group["messages"]) == 5, group
    received = call("POST", f"{proxy}/v1/groups/P/topics/Smoke/receive", {"max_messages": 10})
    handles = [m["receipt_handle"] for m in received["messages"]]
    assert len(handles) == 5 and all(h.startswith("g1~") for h in handles), received
    acked = call("POST", f"{proxy}/v1/groups/P/acks", {"receipt_handles": handles})
    assert {r["outcome"] for r in acked["results"]} == {"acked"}, acked


def step(what: str) -> None:
    print(f"smoke: {what}", flush=True)


def main() -> int:
    bin_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(sys.executable).parent
    work = Path(tempfile.mkdtemp(prefix="spoolmq-smoke-"))
    try:
        smoke(bin_dir, work)
    except AssertionError as exc:
        print(f"smoke test failed: {exc}", file=sys.stderr)
        for log in sorted(work.glob("*.log")):
            print(f"--- {log.name}\n{log.read_text()[-3000:]}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("smoke: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
