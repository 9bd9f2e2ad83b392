"""Spark jobs over spoolmq store directories; they read the files through :mod:`storage` only.

Layout: the modules every job shares stay at the top -- :mod:`~spark_jobs.records` (CommitLog
records as Arrow batches, with :mod:`~spark_jobs.arrays` and
:mod:`~spark_jobs.properties_column`), :mod:`~spark_jobs.scan` (byte ranges),
:mod:`~spark_jobs.datasource` (the Spark data sources), :mod:`~spark_jobs.options`,
:mod:`~spark_jobs.session`, :mod:`~spark_jobs.formatting` and :mod:`~spark_jobs.cli`
(``spoolmq-spark``). Each job is a sub-package: :mod:`spark_jobs.lag` (the lag report) and
:mod:`spark_jobs.replay`, each with a ``__main__`` script for ``spark-submit``. Only
``datasource``, ``session`` and the ``job`` modules import pyspark.
"""
