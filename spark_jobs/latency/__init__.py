"""The delivery latency report from the broker's message trace (``RMQ_SYS_TRACE_TOPIC``).

:mod:`~spark_jobs.latency.report` (the figures, JSON, CSV, the printed table) and
:mod:`~spark_jobs.latency.report_html` (the HTML page) need no pyspark;
:mod:`~spark_jobs.latency.job` is the Spark job and ``__main__`` its ``spark-submit`` entry
script.
"""
