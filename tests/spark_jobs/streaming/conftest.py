"""The cluster the streaming tests run a query against: the proxy tests' ``deployment``
(real etcd, elected brokers in two groups, ``spoolmq proxy``)."""

from tests.app.test_cluster_proxy import deployment  # noqa: F401 - a fixture
