"""The ``spoolmq`` Spark data source over the HTTP API: a streaming and batch source with
checkpointed offsets, and an exactly-once sink.

Modules, one concept each: :mod:`~.options` (parsing), :mod:`~.offsets` (offset JSON,
admission limit, ranges), :mod:`~.discovery` (queues, start positions, retention losses),
:mod:`~.fetch` (an executor's read loop into Arrow), :mod:`~.produce` (rows to keyed
batches), :mod:`~.source` and :mod:`~.sink` (the Spark readers and writers) and
:mod:`~.datasource` (``format("spoolmq")``). Only the last three import pyspark. Requests
and their retries go through :mod:`spark_jobs.http_client`, which the replay uses too.
"""
