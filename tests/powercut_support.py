"""Mount, command and unmount the power-cut file system (:mod:`tests.powercut_fs`) for a test
or a bench; whatever is mounted is unmounted again, by the process that mounted it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class PowerCutMount:
    """One mount of the power-cut file system: its process and its commands."""

    def __init__(self, backing: Path, mount_point: Path) -> None:
        self.backing = backing
        self.mount_point = mount_point
        backing.mkdir(parents=True, exist_ok=True)
        mount_point.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.powercut_fs", str(backing), str(mount_point)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 30
        while not os.path.ismount(mount_point):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.unmount()
                raise RuntimeError(f"the power-cut file system did not mount at {mount_point}")
            time.sleep(0.02)

    def command(self, line: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if not answer.startswith("ok"):
            raise RuntimeError(f"{line}: {answer or 'no answer'}")
        return answer

    def cut(self) -> int:
        """Cut the power: unsynced data is gone; the number of pages put back."""
        _, pages, files = self.command("cut").split()
        return int(pages) + int(files)

    def fail_fsync(self) -> None:
        self.command("fail-fsync")

    def heal(self) -> None:
        self.command("heal")

    def unmount(self) -> None:
        if os.path.ismount(self.mount_point):
            subprocess.run(["fusermount3", "-u", str(self.mount_point)], check=False)
        if os.path.ismount(self.mount_point):
            subprocess.run(["umount", "-l", str(self.mount_point)], check=False)
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        if self.process.stdout is not None:
            self.process.stdout.close()


@contextmanager
def powercut_fs(backing: Path, mount_point: Path) -> Iterator[PowerCutMount]:
    """The file system mounted at ``mount_point`` over ``backing`` for the block."""
    mount = PowerCutMount(backing, mount_point)
    try:
        yield mount
    finally:
        mount.unmount()
