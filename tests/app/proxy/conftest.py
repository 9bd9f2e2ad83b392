"""The proxy's tests run against :func:`tests.app.proxy.support.two_groups`: a real etcd, two
real brokers as broker groups g1 and g2, and the proxy, started afresh for each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.proxy.support import Cluster, two_groups


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)
