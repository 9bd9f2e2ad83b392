"""Streaming queries as processes of their own (killed with -9 by the tests that start
them), and a standalone Spark master + worker on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.net import free_ports

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
FAST_SPARK = [
    "--conf", "spark.ui.enabled=false",
    "--conf", "spark.ui.showConsoleProgress=false",
    "--conf", "spark.sql.shuffle.partitions=2",
    "--conf", "spark.driver.memory=1g",
    "--conf", "spark.driver.extraJavaOptions=-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
]  # fmt: skip
"""The tooling notes' quick local settings, as job arguments."""
_GATEWAY_VARIABLES = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")


def child_env(spark_env: dict[str, str]) -> dict[str, str]:
    """This process's environment for a Spark child, without our own gateway's address."""
    env = {k: v for k, v in os.environ.items() if k not in _GATEWAY_VARIABLES}
    return {**env, **spark_env}


@dataclass
class QueryProcess:
    """A streaming query's driver (and its JVM): a process group of its own."""

    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        """kill -9 the driver, its JVM and their Python workers: no shutdown at all."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def finish(self, timeout: float) -> int:
        """Wait for the query to stop by itself; its exit status."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the query did not finish: {self.output()}") from None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def start_query(
    module: str, args: list[str], env: dict[str, str], log: Path, spark_submit: str | None = None
) -> QueryProcess:
    """``python -m module args`` (or ``spark-submit --master spark_submit`` of the module's
    file), in a new session so that a kill reaches its JVM too."""
    if spark_submit:
        path = ROOT / (module.replace(".", "/") + ".py")
        command = [str(BIN / "spark-submit"), "--master", spark_submit, str(path), *args]
    else:
        command = [sys.executable, "-m", module, *args]
    with log.open("ab") as out:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return QueryProcess(process, log)


def checkpoint_batches(checkpoint: Path) -> tuple[int, int]:
    """(micro-batches planned, micro-batches committed) in a query's checkpoint."""

    def count(name: str) -> int:
        folder = checkpoint / name
        if not folder.is_dir():
            return 0
        return sum(1 for f in folder.iterdir() if f.name.isdigit())

    return count("offsets"), count("commits")


def messages_in(url: str, topic: str) -> int:
    """How many messages ``topic`` holds (0 before it exists). While a proxy's group has no
    master (a failover) it answers 5xx: asked again, for up to 30 s."""
    deadline = time.monotonic() + 30
    answer = httpx.get(f"{url}/v1/topics/{topic}", timeout=10)
    while answer.status_code >= 500 and time.monotonic() < deadline:
        time.sleep(0.2)
        answer = httpx.get(f"{url}/v1/topics/{topic}", timeout=10)
    if answer.status_code == 404:
        return 0
    answer.raise_for_status()
    return sum(q["max_offset"] - q["min_offset"] for q in answer.json()["queues"])


@contextmanager
def standalone_spark(work: Path, env: dict[str, str]) -> Iterator[str]:
    """A standalone master and one worker (2 cores, 2 GiB) on 127.0.0.1; yields its URL."""
    port, web, worker_web = free_ports(3)
    spark_class = str(BIN / "spark-class")
    work.mkdir(parents=True, exist_ok=True)
    processes: list[subprocess.Popen[bytes]] = []
    url = f"spark://127.0.0.1:{port}"
    try:
        for name, command in (
            ("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                        "127.0.0.1", "--port", str(port), "--webui-port", str(web)]),
            ("worker", [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host",
                        "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port",
                        str(worker_web), "--work-dir", str(work / "work")]),
        ):  # fmt: skip
            with (work / f"{name}.log").open("ab") as out:
                processes.append(
                    subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
                )
        _wait_for_worker(f"http://127.0.0.1:{web}/json/", processes)
        yield url
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


def _wait_for_worker(status_url: str, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in processes):
            raise RuntimeError("the standalone master or worker exited")
        try:
            if httpx.get(status_url, timeout=2).json().get("aliveworkers", 0) >= 1:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError("no worker registered with the standalone master")
