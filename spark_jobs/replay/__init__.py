"""The replay job: select stored messages, write them to Parquet or re-send them over HTTP.

:mod:`~spark_jobs.replay.job` is the Spark job (selection, outputs, command line; tag
expressions are read by :func:`storage.tag_filter.subscribed_tags`, as the store's pulls read
them), :mod:`~spark_jobs.replay.http_sender` the re-sending client (no pyspark), and
``__main__`` the ``spark-submit`` entry script.
"""
