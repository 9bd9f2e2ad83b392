"""The ``spoolmq-spark`` command: ``replay``, ``lag-report`` and ``latency``.

The same jobs run under ``spark-submit spark_jobs/replay/__main__.py …``,
``spark-submit spark_jobs/lag/__main__.py …`` and ``spark-submit spark_jobs/latency/__main__.py …``
with the same options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from spark_jobs.lag import job as lag_report
from spark_jobs.latency import job as latency
from spark_jobs.options import OptionError
from spark_jobs.replay import job as replay


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="spoolmq-spark", description="Spark jobs over spoolmq store directories."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    replay_parser = commands.add_parser(
        "replay", help="select stored messages; write Parquet or re-send over HTTP",
        description=replay.DESCRIPTION,
    )  # fmt: skip
    replay.add_arguments(replay_parser)
    replay_parser.set_defaults(run=replay.run)
    lag_parser = commands.add_parser(
        "lag-report", help="consumer lag, Burrow statuses, CSV/Parquet/HTML report",
        description=lag_report.DESCRIPTION,
    )  # fmt: skip
    lag_report.add_arguments(lag_parser)
    lag_parser.set_defaults(run=lag_report.run)
    latency_parser = commands.add_parser(
        "latency", help="delivery latency per topic and group from message trace",
        description=latency.DESCRIPTION,
    )  # fmt: skip
    latency.add_arguments(latency_parser)
    latency_parser.set_defaults(run=latency.run)
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
