"""A SparkSession with Spark's Kafka connector on the classpath: local (``local[2]``) by default, or
on a cluster given its master URL (``spark://host:7077``; the driver ships the jars to the executors).

The connector's jars come from tools/spark_dist.py (resolved once from Maven Central into a cache and
passed as ``spark.jars``), so starting a session needs no Ivy and no network. ``spark.jars`` only
counts when the builder launches the JVM, so a process gets one session with these settings.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[2]"
DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",  # 200 (the default) makes every stateful micro-batch slow
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.memory": "1g",
    "spark.executor.memory": "512m",  # on a cluster (local mode runs tasks in the driver)
    "spark.sql.session.timeZone": "UTC",  # the generator writes event times in UTC
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    "spark.sql.adaptive.enabled": "false",  # tiny local jobs: planning it costs more than it saves
}


def unavailable() -> str | None:
    """None if a session can start here, else why not (no JDK, no pyspark, no connector jars)."""
    if shutil.which("java") is None:
        return "no java: Spark needs a JDK 17+"
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    from tools import spark_dist

    try:
        spark_dist.fetch()
    except Exception as exc:  # no mvn / no network
        return f"Spark's Kafka connector jars unavailable: {exc}"
    return None


def connector_jars() -> str:
    from tools import spark_dist

    return spark_dist.spark_jars()


def spark_session(app: str = "grete-traffic", master: str = DEFAULT_MASTER,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """The process's SparkSession (created on first call), log level WARN."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Python workers use this interpreter
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app).config("spark.jars", connector_jars())
    for k, v in {**DEFAULTS, **(conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
