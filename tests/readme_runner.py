"""Runs README.md's shell blocks as a reader would, and checks their output where it is shown.

Conventions (what a README section must follow so that ``make test`` runs it):

* Every code block is fenced (an indented code block is an error: nothing escapes the runner).
  Blocks whose info string starts with ``sh``, ``bash`` or ``shell`` are shell; any other
  language (``toml``, ``python``, ``text``, ``crontab``) is shown, not run.
* A shell block runs with ``bash`` (``set -eo pipefail``), in order, all in one scratch
  directory (so ``./data`` is fresh). ``uv run ...`` finds the project through ``UV_PROJECT``,
  ``make ...`` through a ``Makefile`` link in the scratch directory; the project's virtualenv
  is *not* on ``PATH`` (a bare ``spoolmq`` fails, as on a fresh clone). Variables do not carry
  from one block to the next: a block that needs an id gets it itself (``jq``).
* Each ``localhost:PORT`` / ``127.0.0.1:PORT`` / ``--port PORT`` in the blocks is rewritten to a
  free port (the same README port to the same free port everywhere), and ``SPOOLMQ_PORT`` is
  the one standing for 8080, the server's default. Write ports as the reader should type them,
  each next to its host (``for b in localhost:8081 localhost:8082``, not ``localhost:$port``).
* A process a block starts in the background (``cmd &``) keeps running until the end of the
  README, then it is stopped with its process group (SIGTERM, then SIGKILL), as is everything
  else the runner started. A block that starts servers waits for them itself (``curl --retry``),
  as a reader's script would have to.
* A marker, an HTML comment right before a block (invisible once rendered), changes how it runs:

  - ``<!-- readme: not run: REASON -->`` — not run (``docker run``, ``make test`` itself, a
    standalone Spark cluster); the reason is required and the runner counts these blocks.
  - ``<!-- readme: server URL -->`` — a command that does not return (``make run``): started in
    the background, then the runner waits until URL answers 2xx (ports rewritten too).
  - ``<!-- readme: stop after N s -->`` — a loop that runs until stopped (a worker loop): the
    runner stops it after N seconds; an exit before that must be a success.
  - ``<!-- readme: timeout N s -->`` — a block allowed longer than the default 120 s.

* The JVMs the Spark examples start run with ``JAVA_TOOL_OPTIONS`` set to the quick-start
  flags the Spark tests use (``JVM_OPTIONS``: serial GC, C1 only), which cut a third of the
  CPU of a short job; the commands are the README's, unchanged.

* A block whose info string contains ``output`` right after a shell block is what that block
  prints on stdout. ``json output``: the stdout is a stream of JSON values, one per expected
  value, each matched as a subset (objects may have more keys; the string ``"…"`` matches any
  value, and ``…`` inside a string any text; a list ending in ``"…"`` may have more items).
  Any other output block is text, matched line by line with ``…`` (or ``...``) as a wildcard.
"""

from __future__ import annotations

import dataclasses
import doctest
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.net import free_port

SHELL_LANGUAGES = frozenset({"sh", "bash", "shell"})
DEFAULT_TIMEOUT_S = 120.0
SERVER_READY_TIMEOUT_S = 90.0
ANY = "…"
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>```+|~~~+)(?P<info>.*)$")
MARKER_KINDS = ("not run", "server", "stop after", "timeout")
MARKER = re.compile(
    r"^<!--\s*readme:\s*(?P<kind>not run|server|stop after|timeout)\b:?\s*(?P<arg>.*?)\s*-->$"
)
PORT_PATTERNS = (
    re.compile(r"(?P<host>(?:localhost|127\.0\.0\.1):)(?P<port>\d{2,5})\b"),
    re.compile(r"(?P<host>--port[= ])(?P<port>\d{2,5})\b"),
)
DEFAULT_SERVER_PORT = 8080
JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


class ReadmeError(Exception):
    """The README breaks the runner's conventions (a line number says where)."""


@dataclass(frozen=True)
class Marker:
    kind: str  # "not run", "server", "stop after", "timeout"
    argument: str


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its info string and its text."""

    line: int  # of the opening fence
    end: int  # of the closing fence
    info: str
    text: str
    marker: Marker | None = None
    expected: Block | None = None

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def is_shell(self) -> bool:
        return self.language in SHELL_LANGUAGES

    @property
    def is_output(self) -> bool:
        return "output" in self.info.split()


def parse_marker(line: str, number: int) -> Marker | None:
    match = MARKER.match(line.strip())
    if match is None:
        if line.strip().startswith("<!--") and "readme:" in line:
            raise ReadmeError(
                f"line {number}: unknown readme marker {line.strip()!r} (kinds: {MARKER_KINDS})"
            )
        return None
    kind, argument = match["kind"], match["arg"]
    if kind == "not run" and not argument:
        raise ReadmeError(f"line {number}: a 'not run' marker needs its reason")
    if kind in {"stop after", "timeout"} and not re.fullmatch(r"\d+ s", argument):
        raise ReadmeError(f"line {number}: {kind!r} takes seconds ('{kind} 5 s')")
    return Marker(kind, argument)


def parse_blocks(markdown: str) -> list[Block]:
    """Every fenced block, with the marker before it and the output block after it."""
    lines = markdown.splitlines()
    blocks: list[Block] = []
    marker: Marker | None = None
    previous_blank = True
    index = 0
    while index < len(lines):
        line, number = lines[index], index + 1
        opening = FENCE.match(line)
        if opening is None:
            if line.startswith("    ") and line.strip() and previous_blank:
                raise ReadmeError(f"line {number}: an indented code block; fence it (```sh)")
            found = parse_marker(line, number)
            if found is not None:
                marker = found
            elif line.strip():
                marker = None
            previous_blank = not line.strip()
            index += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        body: list[str] = []
        index += 1
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][indent:] if lines[index][:indent].isspace() else lines[index])
            index += 1
        if index == len(lines):
            raise ReadmeError(f"line {number}: a fenced block is never closed")
        text = "\n".join(body) + "\n"
        block = Block(number, index + 1, opening["info"].strip(), text, marker)
        if block.is_output:
            shell = blocks[-1] if blocks else None
            follows = shell is not None and all(
                not lines[i].strip() for i in range(shell.end, number - 1)
            )
            if shell is None or not shell.is_shell or shell.expected is not None or not follows:
                raise ReadmeError(f"line {number}: an output block must follow its shell block")
            blocks[-1] = dataclasses.replace(shell, expected=block)
        else:
            if marker is not None and not block.is_shell:
                raise ReadmeError(f"line {number}: a readme marker before a non-shell block")
            blocks.append(block)
        marker = None
        previous_blank = True
        index += 1
    return blocks


# ==================================================================== output checks


def match_json(expected: Any, actual: Any, path: str = "$") -> str | None:
    """Where ``actual`` differs from the ``expected`` pattern, or None when it matches."""
    if expected == ANY:
        return None
    if isinstance(expected, str) and ANY in expected:
        pattern = ".*".join(re.escape(part) for part in expected.split(ANY))
        if isinstance(actual, str) and re.fullmatch(pattern, actual, re.S):
            return None
        return f"{path}: {actual!r} does not match {expected!r}"
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}: expected an object, got {actual!r}"
        for key, value in expected.items():
            if key not in actual:
                return f"{path}: no key {key!r} in {sorted(actual)}"
            problem = match_json(value, actual[key], f"{path}.{key}")
            if problem:
                return problem
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return f"{path}: expected a list, got {actual!r}"
        open_ended = bool(expected) and expected[-1] == ANY
        items = expected[:-1] if open_ended else expected
        if len(actual) < len(items) or (not open_ended and len(actual) != len(items)):
            return f"{path}: {len(actual)} items, expected {len(items)}{'+' if open_ended else ''}"
        for i, item in enumerate(items):
            problem = match_json(item, actual[i], f"{path}[{i}]")
            if problem:
                return problem
        return None
    if type(expected) is not type(actual) or expected != actual:
        return f"{path}: {actual!r}, expected {expected!r}"
    return None


def json_values(text: str) -> list[Any]:
    """Every JSON value of a stream (curl answers printed one after another)."""
    decoder, position = json.JSONDecoder(), 0
    values: list[Any] = []
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return values
        value, position = decoder.raw_decode(text, position)
        values.append(value)


def check_output(expected: Block, stdout: str) -> str | None:
    """What is wrong with ``stdout`` against an output block, or None."""
    if expected.language == "json":
        try:
            actual = json_values(stdout)
        except ValueError as exc:
            return f"the output is not a stream of JSON values ({exc})"
        wanted = json_values(expected.text)
        if len(actual) != len(wanted):
            return f"{len(actual)} JSON values printed, the README shows {len(wanted)}"
        for i, (pattern, value) in enumerate(zip(wanted, actual, strict=True)):
            problem = match_json(pattern, value, f"value {i + 1}")
            if problem:
                return problem
        return None
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    if checker.check_output(expected.text.replace(ANY, "..."), stdout, flags):
        return None
    return "the output differs from the README's"


# ==================================================================== running


@dataclass
class Outcome:
    block: Block
    status: str  # "ran", "not run", "not shell", "failed"
    detail: str = ""


@dataclass
class ReadmeRun:
    """One pass over a README in a scratch directory; :meth:`stop` ends what it started."""

    readme: Path
    project: Path
    scratch: Path
    ports: dict[int, int] = field(default_factory=dict)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)  # group leaders
    outcomes: list[Outcome] = field(default_factory=list)

    def run(self) -> list[Outcome]:
        blocks = parse_blocks(self.readme.read_text())
        self._map_ports(blocks)
        (self.scratch / "Makefile").symlink_to(self.project / "Makefile")
        failed = False
        for block in blocks:
            if not block.is_shell:
                self.outcomes.append(Outcome(block, "not shell"))
            elif block.marker is not None and block.marker.kind == "not run":
                self.outcomes.append(Outcome(block, "not run", block.marker.argument))
            elif failed:
                self.outcomes.append(Outcome(block, "failed", "not reached"))
            else:
                outcome = self._run_block(block)
                self.outcomes.append(outcome)
                failed = outcome.status == "failed"
        return self.outcomes

    def stop(self) -> None:
        """Stop every process group the run started: SIGTERM, a grace period, SIGKILL."""
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            alive = [p for p in self.processes if _signal_group(p, sig)]
            deadline = time.monotonic() + grace
            while alive and time.monotonic() < deadline:
                time.sleep(0.1)
                alive = [p for p in alive if _signal_group(p, 0)]
            if not alive:
                break
        for process in self.processes:  # the leaders are our children: reap them
            process.wait(timeout=10)

    # ---------------------------------------------------------------- ports

    def _map_ports(self, blocks: list[Block]) -> None:
        for block in blocks:
            if block.is_shell:
                for text in (block.text, block.marker.argument if block.marker else ""):
                    for pattern in PORT_PATTERNS:
                        for match in pattern.finditer(text):
                            self.ports.setdefault(int(match["port"]), free_port())
        self.ports.setdefault(DEFAULT_SERVER_PORT, free_port())

    def rewrite(self, text: str) -> str:
        for pattern in PORT_PATTERNS:
            text = pattern.sub(lambda m: m["host"] + str(self.ports[int(m["port"])]), text)
        return text

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        venv_bin = str(Path(sys.prefix) / "bin")
        env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p != venv_bin)
        inherited = [n for n in env if n.startswith("SPOOLMQ_")]
        for name in ("VIRTUAL_ENV", "PYTHONPATH", *inherited):
            env.pop(name, None)
        env["UV_PROJECT"] = str(self.project)
        env["SPOOLMQ_PORT"] = str(self.ports[DEFAULT_SERVER_PORT])
        env["JAVA_TOOL_OPTIONS"] = JVM_OPTIONS
        return env

    # ---------------------------------------------------------------- blocks

    def _start(self, block: Block) -> tuple[subprocess.Popen[bytes], Path, Path]:
        logs = self.scratch / ".readme"
        logs.mkdir(exist_ok=True)
        out, err = logs / f"line-{block.line}.out", logs / f"line-{block.line}.err"
        script = "set -eo pipefail\n" + self.rewrite(block.text)
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                ["bash", "-c", script],
                cwd=self.scratch,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                start_new_session=True,
            )
        self.processes.append(process)
        return process, out, err

    def _run_block(self, block: Block) -> Outcome:
        process, out, err = self._start(block)
        kind = block.marker.kind if block.marker else ""
        argument = block.marker.argument if block.marker else ""
        seconds = float(argument.split()[0]) if kind in ("stop after", "timeout") else 0
        if kind == "server":
            problem = self._wait_ready(self.rewrite(argument), process)
            return self._outcome(block, problem, out, err)
        try:
            code = process.wait(timeout=seconds if kind else DEFAULT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            if kind == "stop after":
                _signal_group(process, signal.SIGTERM)
                process.wait(timeout=30)
                return self._outcome(block, None, out, err)
            _signal_group(process, signal.SIGKILL)
            process.wait(timeout=30)
            return self._outcome(block, "did not finish in time", out, err)
        problem = None if code == 0 else f"exit status {code}"
        if kind == "stop after" and problem is None:
            problem = "a loop the README says runs until stopped ended by itself"
        return self._outcome(block, problem, out, err)

    def _outcome(self, block: Block, problem: str | None, out: Path, err: Path) -> Outcome:
        stdout = out.read_text(errors="replace")
        if problem is None and block.expected is not None:
            problem = check_output(block.expected, stdout)
        if problem is None:
            return Outcome(block, "ran")
        stderr = err.read_text(errors="replace")
        detail = (
            f"{problem}\n--- command (ports rewritten) ---\n{self.rewrite(block.text)}"
            f"--- stdout ---\n{stdout[-4000:]}\n--- stderr ---\n{stderr[-4000:]}"
        )
        return Outcome(block, "failed", detail)

    def _wait_ready(self, url: str, process: subprocess.Popen[bytes]) -> str | None:
        deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return f"the server exited with status {process.returncode}"
            try:
                if httpx.get(url, timeout=2).is_success:
                    return None
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        return f"{url} did not answer 2xx within {SERVER_READY_TIMEOUT_S:.0f} s"

    def logs(self) -> Iterator[tuple[str, str]]:
        """The tail of each block's output files (what background servers said)."""
        for path in sorted((self.scratch / ".readme").glob("line-*")):
            text = path.read_text(errors="replace")
            if text.strip():
                yield path.name, text[-2000:]


def _signal_group(leader: subprocess.Popen[bytes], sig: int) -> bool:
    """Send ``sig`` to the process group ``leader`` started; False once all of it is gone.

    The leader is reaped first when it has exited, so that it does not count as alive (the
    group id stays reserved while any member lives, so it names no one else's group)."""
    leader.poll()
    try:
        os.killpg(leader.pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - the group id was reused by someone else's
        return False
    return True


def describe(outcomes: list[Outcome]) -> str:
    """One line per block, then the failures in full."""
    lines = [
        f"line {o.block.line}: {o.status} {o.detail.splitlines()[0] if o.detail else ''}"
        for o in outcomes
    ]
    failures = [
        f"\n=== line {o.block.line} failed ===\n{o.detail}"
        for o in outcomes
        if o.status == "failed" and o.detail != "not reached"
    ]
    return "\n".join(lines + failures)
