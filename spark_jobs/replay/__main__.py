"""The replay job's entry script: ``spark-submit spark_jobs/replay/__main__.py ...`` or
``python -m spark_jobs.replay ...`` (the same options as ``spoolmq-spark``)."""

import sys

from spark_jobs.replay.job import main

if __name__ == "__main__":
    sys.exit(main())
