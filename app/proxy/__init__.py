"""``spoolmq proxy``: a stateless HTTP front for a cluster of broker groups."""
