"""The proxy's tests run against :func:`tests.app.proxy.support.two_groups`: a real etcd, two
real brokers as broker groups g1 and g2, and the proxy, started afresh for each test; ``hop``
puts a :class:`~tests.app.proxy.support.FaultyHop` between the proxy and g2's master."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.app.proxy.support import (
    Cluster,
    FaultyHop,
    create_topic,
    g2_through_a_hop,
    two_groups,
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


@pytest.fixture
def hop(cluster: Cluster) -> Iterator[FaultyHop]:
    """Topic Hopped (queues 0, 1 on g1; 2, 3 on g2), g2's master reached through a hop."""
    create_topic(cluster.http, "Hopped", 4)
    with g2_through_a_hop(cluster) as hop:
        yield hop
