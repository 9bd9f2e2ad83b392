"""The replay job: select stored messages, write them to Parquet or re-send them over HTTP.

:mod:`~spark_jobs.replay.job` is the Spark job (selection, outputs, command line),
:mod:`~spark_jobs.replay.tags` the tag expressions, :mod:`~spark_jobs.replay.http_sender` the
re-sending client (no pyspark), and ``__main__`` the ``spark-submit`` entry script.
"""
