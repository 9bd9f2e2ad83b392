"""The ``spoolmq-spark`` command: ``replay``, ``lag-report`` and ``latency``.

The same jobs run under ``spark-submit spark_jobs/replay/__main__.py …``,
``spark-submit spark_jobs/lag/__main__.py …`` and ``spark-submit spark_jobs/latency/__main__.py …``
with the same options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Final

from spark_jobs.lag import job as lag_report
from spark_jobs.latency import job as latency
from spark_jobs.options import OptionError
from spark_jobs.replay import job as replay

_JOBS: Final[tuple[tuple[str, Any, str], ...]] = (
    ("replay", replay, "select stored messages; write Parquet or re-send over HTTP"),
    ("lag-report", lag_report, "consumer lag, Burrow statuses, CSV/Parquet/HTML report"),
    ("latency", latency, "delivery latency per topic and group from message trace"),
)
"""Each subcommand: its name, its job module (``DESCRIPTION``, ``add_arguments``, ``run``)
and its one-line help."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="spoolmq-spark", description="Spark jobs over spoolmq store directories."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, job, summary in _JOBS:
        job_parser = commands.add_parser(name, help=summary, description=job.DESCRIPTION)
        job.add_arguments(job_parser)
        job_parser.set_defaults(run=job.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``spoolmq-spark`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except OptionError as exc:
        parser.error(str(exc))
        return 2  # pragma: no cover - parser.error exits


if __name__ == "__main__":
    sys.exit(main())
