"""The lag report job's entry script: ``spark-submit spark_jobs/lag/__main__.py ...`` or
``python -m spark_jobs.lag ...`` (the same options as ``spoolmq-spark``)."""

import sys

from spark_jobs.lag.job import main

if __name__ == "__main__":
    sys.exit(main())
