"""Fixtures of the Spark job tests: one local SparkSession per run, stores, a free port.

The session uses the fast local settings of the tooling notes: local[2], no UI, two shuffle
partitions, 1 GiB driver, SerialGC and C1 only, Arrow on, a temp ``spark.local.dir``, the
venv's Python for the workers (which import ``spark_jobs`` and ``storage`` from the installed
project), 127.0.0.1, and a quiet log4j2 configuration.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.net import free_port

LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
logger.spark.name = org.apache.spark
logger.spark.level = error
"""

FAST_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


@pytest.fixture(scope="session")
def spark_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for Spark (this process and spark-submit subprocesses)."""
    conf_dir = tmp_path_factory.mktemp("spark-conf")
    (conf_dir / "log4j2.properties").write_text(LOG4J2)
    return {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_CONF_DIR": str(conf_dir),
    }


@pytest.fixture(scope="session")
def spark(spark_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The run's SparkSession, with the spoolmq data sources registered."""
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import register

    patch = pytest.MonkeyPatch()
    for name, value in spark_env.items():
        patch.setenv(name, value)
    local_dir = tmp_path_factory.mktemp("spark-local")
    builder = SparkSession.builder.master("local[2]").appName("spoolmq-tests")
    for key, value in {
        **FAST_CONF,
        "spark.local.dir": str(local_dir),
        "spark.sql.warehouse.dir": str(local_dir / "warehouse"),
    }.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    register(session)
    yield session
    session.stop()
    patch.undo()


@pytest.fixture(name="free_port")
def free_port_fixture() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    return free_port()


@pytest.fixture
def venv_bin() -> Path:
    """The directory of this interpreter's console scripts (spark-submit, spoolmq)."""
    return Path(sys.executable).parent
