"""A stand-in for spoolmq's POST endpoints, for client tests that need a server misbehaving:
it answers the failures it was given, in order, then stores what it gets."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class StubState:
    """What the stub received, and how it should misbehave."""

    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    attempts: list[tuple[str | None, dict[str, Any]]] = field(default_factory=list)
    """Every request, refused ones too: its Idempotency-Key and body."""
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    """Answered first, one a request, in order: (status, headers)."""
    refuse_with: int | None = None  # answer every request with this status
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail(self, status: int, times: int = 1, headers: Mapping[str, str] | None = None) -> None:
        """Answer the next ``times`` requests (after the failures already given) ``status``,
        with ``headers``."""
        with self.lock:
            self.failures += [(status, dict(headers or {}))] * times

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for _, body in self.requests for m in body.get("messages", [])]


def _handler(state: StubState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length))
            with state.lock:
                state.attempts.append((self.headers.get("idempotency-key"), body))
                if state.refuse_with is not None:
                    self._answer(state.refuse_with, {"code": "REFUSED", "detail": "no thanks"})
                    return
                if state.failures:
                    status, headers = state.failures.pop(0)
                    self._answer(status, {"code": "BUSY", "detail": "try again"}, headers)
                    return
                state.requests.append((self.path, body))
                sent = body.get("messages", [])
                start = len(state.messages) - len(sent)
            answer = {
                "messages": [
                    {"msg_id": f"ID{start + i:06d}", "queue_id": 0, "queue_offset": start + i}
                    for i in range(len(sent))
                ]
            }
            self._answer(201, answer)

        def _answer(
            self, status: int, payload: dict[str, Any], headers: Mapping[str, str] | None = None
        ) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


@contextmanager
def stub_server() -> Iterator[tuple[str, StubState]]:
    """Serve on a free port of 127.0.0.1; yields (base URL, state)."""
    state = StubState()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
