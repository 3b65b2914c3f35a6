"""Helpers shared by the Spark compat tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import time
from typing import Any

# --- helpers ---------------------------------------------------------------------------------

# Short client timeouts so a broker that does not answer fails a test in seconds, not in the
# connector's default 120 s poll timeout.
SOURCE_TIMEOUTS: dict[str, str] = {
    "kafkaConsumer.pollTimeoutMs": "5000",
    "fetchOffset.retryIntervalMs": "200",
    "kafka.request.timeout.ms": "10000",
    "kafka.default.api.timeout.ms": "15000",
}


def read_batch(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    """``spark.read.format("kafka")`` over ``topic`` with the short timeouts and ``options``."""
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    for k, v in {**SOURCE_TIMEOUTS, **options}.items():
        reader = reader.option(k, v)
    return reader.load()


def produce_records(bootstrap: str, topic: str, records: list[dict[str, Any]], **config: Any) -> list[Any]:
    """Produce each record (kwargs of confluent-kafka's ``produce``); returns the delivered messages."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    delivered: list[Any] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        (errors if err is not None else delivered).append(err if err is not None else msg)

    for r in records:
        p.produce(topic, on_delivery=report, **r)
    assert p.flush(30) == 0, "messages left undelivered"
    assert not errors, f"delivery errors: {errors}"
    return sorted(delivered, key=lambda m: (m.partition(), m.offset()))


def values(n: int, prefix: str = "v") -> list[dict[str, Any]]:
    return [{"key": f"k{i}".encode(), "value": f"{prefix}{i}".encode()} for i in range(n)]


def drain_available_now(spark: Any, bootstrap: str, topic: str, checkpoint: str, out_topic: str,
                        timeout: float = 120.0, **options: str) -> Exception | None:
    """One ``Trigger.AvailableNow`` run: source ``topic`` -> Kafka sink ``out_topic`` with producer
    defaults, each output row keyed "<partition>:<offset>" of its input. Returns the query's error."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for k, v in {**SOURCE_TIMEOUTS, **options}.items():
        reader = reader.option(k, v)
    rows = reader.load().selectExpr("concat(CAST(partition AS STRING), ':', CAST(offset AS STRING)) AS key",
                                    "value")
    query = (rows.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", out_topic).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    try:
        finished = query.awaitTermination(timeout)
    except Exception as exc:  # StreamingQueryException: the query failed
        return exc
    assert finished, f"AvailableNow query still running after {timeout}s"
    return query.exception()


def read_topic(bootstrap: str, topic: str, partition: int = 0, isolation: str = "read_uncommitted") -> list[Any]:
    """Every record of one partition from the log start to the high watermark (confluent-kafka)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-compat-reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        c.assign([TopicPartition(topic, partition, low)])
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msgs = c.consume(num_messages=500, timeout=0.5)
            got += [m for m in msgs if m.error() is None]
            if any(m.error() is not None and m.error().code() == -191 for m in msgs):  # _PARTITION_EOF
                return got
        raise AssertionError(f"{topic}[{partition}] not read to its end {high} within 30s (got {len(got)})")
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-compat-reader"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        c.close()


def error_text(exc: BaseException | None) -> str:
    """A Py4J / streaming error's message without the Java stack frames."""
    lines = str(exc).splitlines()
    return "\n".join(line for line in lines if not line.strip().startswith("at "))
