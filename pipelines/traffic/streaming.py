"""The Structured Streaming job: both topics through Spark's Kafka source, parse, join flow with speed
per lane and 1-second event-time window, aggregate per window and site, Kafka sink.

The stages follow OSPBench's Structured Streaming job (ingest, parse, join, tumbling window): the
join pairs a flow and a speed event of the same key (site + copy prefix), lane and event second; the
aggregate sums flow and averages speed over the lanes of a site. ``publishTimestamp`` is the newest
input Kafka timestamp behind an output row, so ``output timestamp - publishTimestamp`` is OSPBench's
latency. The sink gets only the bootstrap servers and the topic: the producer runs on kafka-clients'
defaults (acks=all, enable.idempotence=true). Spark's Kafka sink is still at-least-once (a micro-batch
retried after a failure writes its rows again), so each row is keyed by its window,
"<measurementId>@<window start, epoch seconds>": a consumer keeping the last value per key reads each
window once, and a compacted output topic keeps one record per window.

A window closes when the watermark (the newest event time seen on both inputs minus ``WATERMARK_S``)
passes its end, so the input of a bounded run must end with an event ``CLOSE_AFTER_S`` seconds after
its last one (generator.end_input) for the last windows to be written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipelines.traffic.data import FLOW_TOPIC, OUTPUT_TOPIC, SPEED_TOPIC, WINDOW_KEY_SEP

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.types import StructType

TIME_FORMAT = "yyyy-MM-dd HH:mm:ss"
WATERMARK_S = 2
WINDOW_S = 1
# An event this many seconds after second s moves the watermark past the end of s's window.
CLOSE_AFTER_S = WATERMARK_S + WINDOW_S + 1


def flow_schema() -> StructType:
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    return StructType([
        StructField("internalId", StringType(), False), StructField("lat", DoubleType()),
        StructField("long", DoubleType()), StructField("flow", IntegerType()),
        StructField("period", IntegerType()), StructField("accuracy", IntegerType()),
        StructField("timestamp", StringType()), StructField("num_lanes", IntegerType()),
        StructField("gen_ns", LongType()),
    ])


def speed_schema() -> StructType:
    from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

    return StructType([
        StructField("internalId", StringType(), False), StructField("lat", DoubleType()),
        StructField("long", DoubleType()), StructField("speed", DoubleType()),
        StructField("accuracy", IntegerType()), StructField("timestamp", StringType()),
        StructField("num_lanes", IntegerType()), StructField("gen_ns", LongType()),
    ])


def kafka_stream(spark: SparkSession, bootstrap: str, topic: str, starting: str = "latest",
                 **options: str) -> DataFrame:
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", starting))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def parse(raw: DataFrame, schema: StructType, measure: str, prefix: str) -> DataFrame:
    """Kafka rows -> typed columns; ``measure`` is "flow" or "speed"; names get ``prefix``."""
    from pyspark.sql import functions as F

    body = F.from_json(F.col("value").cast("string"), schema)
    return raw.select(
        F.col("key").cast("string").alias(f"{prefix}Key"),
        body["internalId"].alias(f"{prefix}Lane"),
        body[measure].alias(measure),
        body["num_lanes"].alias(f"{prefix}NumLanes"),
        F.to_timestamp(body["timestamp"], TIME_FORMAT).alias(f"{prefix}EventTs"),
        F.col("timestamp").alias(f"{prefix}PublishTs"),
    )


def join_and_aggregate(flow: DataFrame, speed: DataFrame, watermark: str = f"{WATERMARK_S} seconds") -> DataFrame:
    """Inner stream-stream join on (key, lane, event second), then a 1 s tumbling window per site.

    The watermark leaves room for a site's lanes to be joined in different micro-batches (flow and
    speed are separate topics) before its window is closed; later rows would be dropped."""
    from pyspark.sql import functions as F

    f = flow.withWatermark("fEventTs", watermark)
    s = speed.withWatermark("sEventTs", watermark)
    joined = f.join(s, (F.col("fKey") == F.col("sKey")) & (F.col("fLane") == F.col("sLane"))
                    & (F.col("fEventTs") == F.col("sEventTs")))
    return (joined
            .withColumn("publishTs", F.greatest("fPublishTs", "sPublishTs"))
            .groupBy(F.window("fEventTs", f"{WINDOW_S} second"), F.col("fKey").alias("measurementId"))
            .agg(F.sort_array(F.collect_set("fLane")).alias("lanes"),
                 F.sum("flow").alias("accumulatedFlow"),
                 F.avg("speed").alias("averageSpeed"),
                 F.max("fNumLanes").alias("numLanes"),
                 F.max("publishTs").alias("publishTs")))


def to_kafka_rows(agg: DataFrame) -> DataFrame:
    """key = the window (site with copy prefix, window start), value = JSON of the window's figures."""
    from pyspark.sql import functions as F

    key = F.concat("measurementId", F.lit(WINDOW_KEY_SEP), F.unix_seconds("window.start").cast("string"))
    value = F.to_json(F.struct(
        "measurementId", F.col("window.start").alias("windowStart"), "lanes", "numLanes",
        "accumulatedFlow", F.round("averageSpeed", 2).alias("averageSpeed"),
        (F.unix_millis("publishTs")).alias("publishTimestamp")))
    return agg.select(key.alias("key"), value.alias("value"))


def build(spark: SparkSession, bootstrap: str, starting: str = "latest", flow_topic: str = FLOW_TOPIC,
          speed_topic: str = SPEED_TOPIC, **source_options: str) -> DataFrame:
    """The whole transformation as a streaming DataFrame of (key, value) for the Kafka sink."""
    flow = parse(kafka_stream(spark, bootstrap, flow_topic, starting, **source_options),
                 flow_schema(), "flow", "f")
    speed = parse(kafka_stream(spark, bootstrap, speed_topic, starting, **source_options),
                  speed_schema(), "speed", "s")
    return to_kafka_rows(join_and_aggregate(flow, speed))


def start(spark: SparkSession, bootstrap: str, checkpoint: str, output_topic: str = OUTPUT_TOPIC,
          starting: str = "latest", available_now: bool = False, flow_topic: str = FLOW_TOPIC,
          speed_topic: str = SPEED_TOPIC, **source_options: str) -> StreamingQuery:
    """Start the job writing to ``output_topic`` through Spark's Kafka sink (producer defaults)."""
    rows = build(spark, bootstrap, starting, flow_topic, speed_topic, **source_options)
    writer = (rows.writeStream.format("kafka").outputMode("append")
              .option("kafka.bootstrap.servers", bootstrap).option("topic", output_topic)
              .option("checkpointLocation", checkpoint).queryName("traffic"))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="500 milliseconds")
    return writer.start()
