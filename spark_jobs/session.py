"""The SparkSession of the jobs: local mode by default, any master through ``--master`` or
``spark-submit``, the spoolmq data sources registered.

Under ``spark-submit`` the master and every ``--conf`` come from the command line; this module
only adds defaults that the submitter did not set. Run directly (``spoolmq-spark …``), the
session is local (``local[*]``) unless ``--master`` says otherwise.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from pyspark.sql import SparkSession

from spark_jobs.datasource import register

DEFAULT_CONF: Final = {
    "spark.log.level": "WARN",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    # Parquet timestamps as UTC-adjusted microseconds (readable as UTC by pyarrow, pandas,
    # DuckDB), not Spark's legacy INT96.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.shuffle.partitions": "8",
}
"""Defaults for the jobs' sessions; anything given explicitly wins."""

QUIET_CONF_DIR: Final = Path(__file__).resolve().parent / "conf"


def build_session(
    app_name: str,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """The active session, or a new one (configured by ``spark-submit`` when under it), with
    the data sources registered.

    ``PYSPARK_PYTHON`` defaults to this interpreter so that executors on this machine import
    the same installed ``spark_jobs`` and ``storage`` packages.
    """
    active = SparkSession.getActiveSession()
    if active is not None:  # embedded (a notebook, a test run): use it as it is
        register(active)
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif "spark.master" not in _submitted_conf():
        builder = builder.master("local[*]")
        _quiet_local_jvm()
    submitted = _submitted_conf()
    for key, value in DEFAULT_CONF.items():
        if key not in submitted:
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _quiet_local_jvm() -> None:
    """Before a local JVM starts: Spark's log4j set to errors only (``conf/``, unless
    ``SPARK_CONF_DIR`` says otherwise), and loopback as its address (local mode talks to
    itself only; without it Spark warns about the host name on every run)."""
    os.environ.setdefault("SPARK_CONF_DIR", str(QUIET_CONF_DIR))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _submitted_conf() -> dict[str, str]:
    """Spark settings given to ``spark-submit`` (passed to Python as ``spark.*`` properties).

    Empty when the job was started without ``spark-submit``.
    """
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return {}
    from pyspark import SparkConf

    return dict(SparkConf().getAll())


def parse_conf(items: list[str] | None) -> dict[str, str]:
    """``--conf key=value`` arguments as a dict."""
    conf: dict[str, str] = {}
    for item in items or []:
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise ValueError(f"--conf takes key=value, not {item!r}")
        conf[key.strip()] = value
    return conf
