"""The lag report: snapshots of consumer lag from store files, Burrow's statuses, outputs.

:mod:`~spark_jobs.lag.snapshot` (store files -> rows, lag as :mod:`storage.lag_model` defines
it; POP groups' in-flight counts from :mod:`~spark_jobs.lag.pop_state`),
:mod:`~spark_jobs.lag.burrow` (statuses over a window), :mod:`~spark_jobs.lag.report`
(one run's report), :mod:`~spark_jobs.lag.output` and :mod:`~spark_jobs.lag.report_html`
(tables, CSV, HTML) need no pyspark; :mod:`~spark_jobs.lag.job` is the Spark job and
``__main__`` its ``spark-submit`` entry script.
"""
