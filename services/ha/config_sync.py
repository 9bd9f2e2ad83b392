"""A slave copies its master's config files (RocketMQ's SlaveSynchronize).

Every ``interval_s`` it fetches ``GET {master}/v1/replication/configs`` and writes each
file through its config manager (the crash-safe writer), only when it changed. The POP
state file, the secret that signs receipt handles and the timer wheel's progress
(:mod:`services.timer.progress_file`) go to disk as they are: the slave reads them only when
promoted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

import httpx

from services.background import BackgroundLoop
from services.pop.handles import adopt_secret
from services.pop.state_file import POP_STATE_FILE
from services.timer.progress_file import save_progress
from services.tls import TlsConfig, client_context
from storage.config_managers import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)
from storage.json_file import save_json

log = logging.getLogger(__name__)

ConfigManager = (
    TopicConfigManager | SubscriptionGroupManager | ConsumerOffsetManager | DelayOffsetManager
)


class SlaveConfigSync:
    """Periodic copy of the master's configs into this slave's managers."""

    def __init__(
        self,
        http_url: str,
        managers: Mapping[str, ConfigManager],
        config_dir: Path,
        interval_s: float = 2.0,
        headers: Mapping[str, str] | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        self.http_url = http_url
        self.tls = tls  # an https master's certificate is checked against its CA
        self.managers = managers
        self.config_dir = config_dir
        self.interval_s = interval_s
        self.headers = headers
        self._last: dict[str, object] = {}
        self._loop = BackgroundLoop(
            "slave-config-sync", self._sync_or_log, interval_s, step_first=True
        )

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _sync_or_log(self) -> None:
        try:
            await self.sync_once()
        except (httpx.HTTPError, ValueError, OSError) as exc:
            log.info("config sync from %s failed: %s", self.http_url, exc)

    async def sync_once(self) -> None:
        async with httpx.AsyncClient(
            base_url=self.http_url,
            timeout=5.0,
            headers=self.headers,
            verify=client_context(self.tls) or True,
        ) as client:
            response = await client.get("/v1/replication/configs")
            response.raise_for_status()
            root = response.json()
        if not isinstance(root, dict):
            raise ValueError("the configs answer is not an object")
        await asyncio.to_thread(self._write, root)

    def _write(self, root: dict[str, object]) -> None:
        for key, manager in self.managers.items():
            content = root.get(key)
            if isinstance(content, dict) and content != self._last.get(key):
                manager.replace_from_json(content)
                self._last[key] = content
        pop_state = root.get("pop_state")
        if isinstance(pop_state, dict) and pop_state != self._last.get("pop_state"):
            save_json(self.config_dir / POP_STATE_FILE, pop_state)
            self._last["pop_state"] = pop_state
        timer_progress = root.get("timer_progress")
        changed = timer_progress != self._last.get("timer_progress")
        if changed and save_progress(self.config_dir, timer_progress):
            self._last["timer_progress"] = timer_progress
        pop_secret = root.get("pop_secret")
        if isinstance(pop_secret, str) and pop_secret != self._last.get("pop_secret"):
            adopt_secret(self.config_dir, pop_secret)
            self._last["pop_secret"] = pop_secret
