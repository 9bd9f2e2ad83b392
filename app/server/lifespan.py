"""The ASGI lifespan protocol: the app's start-up before the first request, its shut-down
after the last."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from app.server.exchange import App, Message

log = logging.getLogger("spoolmq.server")


class LifespanError(Exception):
    """The app's start-up or shut-down failed."""


class Lifespan:
    """Runs the app's lifespan in a task of its own, step by step."""

    def __init__(self, app: App, state: dict[str, Any] | None = None) -> None:
        self.app = app
        self.state = {} if state is None else state  # the scope's: requests get copies
        self.task: asyncio.Task[None] | None = None
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.answers: asyncio.Queue[Message] = asyncio.Queue()
        self.supported = True
        self.received = False  # the app asked for its first message

    async def startup(self) -> None:
        """Raises LifespanError when the app says its start-up failed."""
        self.task = asyncio.create_task(self._run(), name="lifespan")
        await self._step("lifespan.startup")

    async def shutdown(self) -> None:
        if self.task is None or not self.supported:
            return
        try:
            await self._step("lifespan.shutdown")
        finally:
            await asyncio.wait({self.task})

    async def _step(self, event: str) -> None:
        await self.inbox.put({"type": event})
        answer = await self.answers.get()
        if answer["type"] == f"{event}.failed":
            raise LifespanError(answer.get("message") or f"{event} failed")

    async def _receive(self) -> Message:
        self.received = True
        return await self.inbox.get()

    async def _run(self) -> None:
        scope: dict[str, Any] = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        try:
            await self.app(scope, self._receive, self.answers.put)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # ASGI: an app that raises in its lifespan, rather than answering "failed", is
            # served on without one, as an app that does not support it at all.
            if self.received:
                log.error("the app's lifespan raised", exc_info=exc)
            else:
                log.info("the app has no lifespan (%s: %s)", type(exc).__name__, exc)
            self.supported = False
            await self.answers.put({"type": _ENDED})
        else:
            self.supported = False  # returned: nothing more to step through
            await self.answers.put({"type": _ENDED})


_ENDED = "spoolmq.lifespan.ended"
"""The app returned or raised: the step in progress has nothing more to do."""
