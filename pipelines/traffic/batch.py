"""Batch reads (``spark.read.format("kafka")``): an exact offset range, and a start by timestamp."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def by_offsets(spark: SparkSession, bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]],
               **options: str) -> DataFrame:
    """Records with start <= offset < end for each partition: ``ranges = {partition: (start, end)}``.
    Offsets -2 / -1 mean earliest / latest, as in Spark's JSON offsets."""
    starting = {topic: {str(p): s for p, (s, _) in ranges.items()}}
    ending = {topic: {str(p): e for p, (_, e) in ranges.items()}}
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", json.dumps(starting))
              .option("endingOffsets", json.dumps(ending)))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def from_timestamp(spark: SparkSession, bootstrap: str, topic: str, timestamps_ms: dict[int, int],
                   **options: str) -> DataFrame:
    """Records from the first one with timestamp >= the partition's timestamp (ms) to the latest."""
    starting = {topic: {str(p): ts for p, ts in timestamps_ms.items()}}
    reader = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsetsByTimestamp", json.dumps(starting))
              .option("endingOffsets", "latest"))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def summary(df: DataFrame) -> dict[str, object]:
    """Count, offset bounds and timestamp bounds of a Kafka batch DataFrame."""
    from pyspark.sql import functions as F

    row = df.agg(F.count("*").alias("records"), F.min("offset").alias("first_offset"),
                 F.max("offset").alias("last_offset"), F.min("timestamp").alias("first_ts"),
                 F.max("timestamp").alias("last_ts")).collect()[0]
    return {k: (str(v) if k.endswith("_ts") and v is not None else v) for k, v in row.asDict().items()}
