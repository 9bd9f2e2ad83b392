"""Spark jobs and data sources for spoolmq: over store directories (read-only, through
:mod:`storage`) and over running brokers (through their HTTP API only).

Layout: the modules every job shares stay at the top -- :mod:`~spark_jobs.records` (CommitLog
records as Arrow batches, with :mod:`~spark_jobs.arrays` and
:mod:`~spark_jobs.properties_column`), :mod:`~spark_jobs.scan` (byte ranges),
:mod:`~spark_jobs.datasource` (the Spark data sources), :mod:`~spark_jobs.options`,
:mod:`~spark_jobs.session`, :mod:`~spark_jobs.properties` (what a re-send may carry),
:mod:`~spark_jobs.problems` (error answers), :mod:`~spark_jobs.formatting` and
:mod:`~spark_jobs.cli` (``spoolmq-spark``). Each job is a sub-package: :mod:`spark_jobs.lag`
(the lag report) and :mod:`spark_jobs.replay`, each with a ``__main__`` script for
``spark-submit``. :mod:`spark_jobs.streaming` is the ``spoolmq`` data source over HTTP
(Structured Streaming and batch, read and write) and its example job. Only ``datasource``,
``session``, the ``job`` modules and the streaming package's ``source``, ``sink``,
``datasource`` and ``paid_orders`` import pyspark.
"""
