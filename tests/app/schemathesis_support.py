"""Running schemathesis over a live server: every check, positive data acceptance included.

A request the document calls valid must be accepted (2xx) or refused for a state the
document cannot know (401, 403, 404, 409, 429, 5xx: schemathesis's default). The few
operations where a schema truly cannot say what the server refuses are listed in
:data:`SCHEMA_CANNOT_SAY`, each with the status it may answer and why; nothing else is
excused. ``use_after_free`` stays off: consumer groups are created on first use (RocketMQ's
autoCreateSubscriptionGroup), so a pull after DELETE /v1/groups/{group} succeeds.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

BIN = Path(sys.executable).parent

ACCEPTED: tuple[str, ...] = ("2xx", "3xx", "401", "403", "404", "409", "429", "5xx")
"""What positive data may be answered with (schemathesis's default, written out)."""

_FILTER_GRAMMAR: Final = (
    "a SQL92 filter's grammar is no JSON Schema: its schema gives the length, the parser "
    "whether it is a filter (INVALID_FILTER)"
)

SCHEMA_CANNOT_SAY: dict[str, tuple[tuple[str, ...], str]] = {
    "sendMessages": (
        ("400", "422"),
        "a deliver_at at most --timer-max-delay-s ahead of now (a schema has no now: "
        "TIMER_MESSAGE_ILLEGAL); the raw body's query parameters refused with a JSON body "
        "(OpenAPI cannot tie parameters to a content type: PARAMETER_NOT_ALLOWED) and their "
        "timing rules (deliver_at, deliver_after_ms, delay_level: one at most, "
        "INVALID_PROPERTY); a batch's messages agreeing on one queue and its bodies' total "
        "size (no schema compares items or sums them: BATCH_REJECTED)",
    ),
    "sendHalfMessage": (
        ("400",),
        "a deliver_at at most --timer-max-delay-s ahead of now (a schema has no now: "
        "TIMER_MESSAGE_ILLEGAL)",
    ),
    "cancelTimer": (
        ("400",),
        "a timer handle is the broker's base64url encoding of the message it names: its "
        "pattern gives the shape, not whether it decodes to a handle (INVALID_TIMER_HANDLE)",
    ),
    "changeInvisibility": (
        ("400",),
        "a receipt handle is signed by the broker: its pattern gives the shape, only the "
        "broker can tell a genuine one (INVALID_RECEIPT_HANDLE)",
    ),
    "pullMessages": (
        ("400",),
        "commit_offset needs the group parameter: OpenAPI cannot make one query parameter "
        "require another (INVALID_REQUEST); a SQL92 filter's grammar is no JSON Schema "
        "(INVALID_FILTER)",
    ),
    "pullGroupMessages": (("400",), _FILTER_GRAMMAR),
    "readQueueRecords": (("400",), _FILTER_GRAMMAR),
    "receiveMessages": (("400",), _FILTER_GRAMMAR),
    "putGroup": (("400",), _FILTER_GRAMMAR),
}
"""operationId → (the statuses positive data may also get, why no schema can say it)."""


STATEFUL_NAMES_WITH_PERCENT: Final = (
    "The stateful phase puts names from one answer into the next request's path, and "
    "schemathesis leaves a `%` that looks like an escape as it is: the group `%DLQ%00x` "
    "(RocketMQ's own naming) reaches the server as `%DLQ` + NUL + `x`, a name the server "
    "rightly refuses (INVALID_TOPIC_NAME). So that phase checks everything but acceptance."
)


def config_file(workdir: Path) -> Path:
    """A schemathesis configuration with :data:`SCHEMA_CANNOT_SAY`'s exceptions, and
    positive data acceptance off in the stateful phase (:data:`STATEFUL_NAMES_WITH_PERCENT`)."""
    lines = [
        "[checks.use_after_free]",
        "enabled = false",
        "",
        f"# {STATEFUL_NAMES_WITH_PERCENT}",
        "[phases.stateful.checks.positive_data_acceptance]",
        "enabled = false",
        "",
    ]
    for operation_id, (extra, reason) in SCHEMA_CANNOT_SAY.items():
        statuses = json.dumps([*ACCEPTED, *extra])
        lines += [
            f"# {reason}",
            "[[operations]]",
            f'include-operation-id = "{operation_id}"',
            f"checks.positive_data_acceptance.expected-statuses = {statuses}",
            "",
        ]
    path = workdir / "schemathesis.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def run_schemathesis(
    schema: Path,
    url: str,
    workdir: Path,
    *,
    seed: int,
    max_examples: int,
    request_timeout_s: int,
    headers: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    """One schemathesis run of every operation and every check but ``use_after_free``."""
    command = [
        str(BIN / "schemathesis"),
        "--config-file",
        str(config_file(workdir)),
        "run",
        str(schema),
        "--url",
        url,
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        # One worker: hypothesis parses lambda sources with ast.parse, and CPython 3.11.7
        # can corrupt the AST constructor's recursion count when two threads do that at
        # once ("SystemError: AST constructor recursion depth mismatch").
        "--workers",
        "1",
        "--generation-database",
        "none",
        "--request-timeout",
        str(request_timeout_s),
        "--no-shrink",
    ]
    for header in headers:
        command += ["--header", header]
    return subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=300, cwd=workdir
    )


@contextmanager
def generated_sdk(document: Path, package: str, root: Path) -> Iterator[Any]:
    """A Python client generated from ``document`` by openapi-python-client into ``root``,
    imported as ``package`` (and forgotten afterwards)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [str(BIN / "openapi-python-client"), "generate", "--path", str(document)]
    command += ["--meta", "none", "--output-path", str(root / package)]
    result = subprocess.run(
        command, capture_output=True, text=True, check=False, env=env, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module(package)
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m.split(".")[0] == package]:
            del sys.modules[name]
