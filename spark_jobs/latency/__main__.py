"""The latency report's entry script: ``spark-submit spark_jobs/latency/__main__.py ...`` or
``python -m spark_jobs.latency ...`` (the same options as ``spoolmq-spark latency``)."""

import sys

from spark_jobs.latency.job import main

if __name__ == "__main__":
    sys.exit(main())
