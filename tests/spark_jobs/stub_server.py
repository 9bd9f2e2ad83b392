"""A stand-in for spoolmq's send endpoint, for sender tests that need a server misbehaving."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
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
    fail_first: int = 0  # answer fail_status to this many requests first
    fail_status: int = 503
    refuse_with: int | None = None  # answer every request with this status
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return [m for _, body in self.requests for m in body["messages"]]


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
                if state.fail_first > 0:
                    state.fail_first -= 1
                    self._answer(state.fail_status, {"code": "BUSY", "detail": "try again"})
                    return
                state.requests.append((self.path, body))
                start = len(state.messages) - len(body["messages"])
            answer = {
                "messages": [
                    {"msg_id": f"ID{start + i:06d}", "queue_id": 0, "queue_offset": start + i}
                    for i in range(len(body["messages"]))
                ]
            }
            self._answer(201, answer)

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
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
