"""A process that imports the server once, then forks a ``spoolmq serve`` per request: the
crash-round tests restart a server in the time its store takes to open, not the seconds the
imports take. Run as ``python -m tests.serve_zygote``; driven by :class:`ForkedServe`
(tests/serve_process.py).

Protocol, one JSON line each way: ``{"argv": [...], "env": {...}}`` in, the child's PID out.
The zygote has no threads when it forks, and ignores SIGCHLD so the kernel reaps every child
it kills; it ends when its stdin closes.
"""

from __future__ import annotations

import json
import os
import signal
import sys

from app.cli import main


def serve_child(argv: list[str], env: dict[str, str]) -> None:
    """In the child: no inherited pipes, the asked environment, then the server."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.environ.update(env)
    code = 1
    try:
        code = main(argv)
    finally:
        os._exit(code)


def run() -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            serve_child(list(request["argv"]), dict(request["env"]))
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    run()
