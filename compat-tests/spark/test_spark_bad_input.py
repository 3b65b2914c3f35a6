"""Bad input to Spark's Kafka source gets the same Spark-side outcome as against Apache Kafka: a topic
that does not exist, offsets out of range, a timestamp after the last record. The expected outcomes
are what Spark 4 reports against Apache Kafka 4.3 (the differential run checks them there first)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from spark_helpers import SOURCE_TIMEOUTS, error_text, produce_records, read_batch, values

pytestmark = pytest.mark.slow

UNKNOWN_TOPIC = "UnknownTopicOrPartitionException"


def missing() -> str:
    return f"missing-{uuid.uuid4().hex[:10]}"


def test_batch_over_missing_topic_fails_unknown_topic(spark: Any, broker: Any) -> None:
    with pytest.raises(Exception) as info:
        read_batch(spark, broker.bootstrap, missing()).collect()
    assert UNKNOWN_TOPIC in error_text(info.value)


def test_batch_assign_missing_topic_fails_unknown_topic(spark: Any, broker: Any) -> None:
    topic = missing()
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in {**SOURCE_TIMEOUTS, "assign": json.dumps({topic: [0]})}.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as info:
        reader.load().collect()
    assert UNKNOWN_TOPIC in error_text(info.value)


def test_stream_over_missing_topic_fails_unknown_topic(spark: Any, broker: Any) -> None:
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("subscribe", missing()).option("startingOffsets", "earliest"))
    for k, v in SOURCE_TIMEOUTS.items():
        reader = reader.option(k, v)
    query = (reader.load().writeStream.format("memory").queryName(f"m{uuid.uuid4().hex[:8]}")
             .trigger(availableNow=True).start())
    try:
        with pytest.raises(Exception) as info:
            query.awaitTermination(60)
        assert UNKNOWN_TOPIC in error_text(info.value)
        assert not query.isActive
    finally:
        query.stop()


def test_start_offset_past_latest_is_rejected(spark: Any, broker: Any, fresh_topic: str) -> None:
    produce_records(broker.bootstrap, fresh_topic, values(10))
    with pytest.raises(Exception) as info:
        read_batch(spark, broker.bootstrap, fresh_topic, startingOffsets=json.dumps({fresh_topic: {"0": 50}})).collect()
    assert "start offset 50 is greater than the resolved end offset 10" in error_text(info.value)


@pytest.mark.parametrize("start", [0, 40])
def test_end_offset_past_latest_is_data_loss(spark: Any, broker: Any, fresh_topic: str, start: int) -> None:
    produce_records(broker.bootstrap, fresh_topic, values(10))
    opts = {"startingOffsets": json.dumps({fresh_topic: {"0": start}}),
            "endingOffsets": json.dumps({fresh_topic: {"0": 50}})}
    with pytest.raises(Exception) as info:
        read_batch(spark, broker.bootstrap, fresh_topic, **opts).collect()
    assert "Some data may have been lost" in error_text(info.value)


def test_end_offset_past_latest_without_fail_on_data_loss_reads_what_exists(spark: Any, broker: Any,
                                                                           fresh_topic: str) -> None:
    produce_records(broker.bootstrap, fresh_topic, values(10))
    df = read_batch(spark, broker.bootstrap, fresh_topic, startingOffsets=json.dumps({fresh_topic: {"0": 4}}),
                    endingOffsets=json.dumps({fresh_topic: {"0": 50}}), failOnDataLoss="false")
    assert sorted(r.offset for r in df.collect()) == list(range(4, 10))


def test_timestamp_after_last_record(spark: Any, broker: Any, fresh_topic: str) -> None:
    now = int(time.time() * 1000)
    produce_records(broker.bootstrap, fresh_topic, [{"value": b"x", "timestamp": now - 10_000 + i} for i in range(5)])
    after = json.dumps({fresh_topic: {"0": now + 3_600_000}})
    with pytest.raises(Exception) as info:  # startingOffsetsByTimestampStrategy=error (the default)
        read_batch(spark, broker.bootstrap, fresh_topic, startingOffsetsByTimestamp=after).collect()
    assert "No offset matched from request of topic-partition" in error_text(info.value)
    latest = read_batch(spark, broker.bootstrap, fresh_topic, startingOffsetsByTimestamp=after,
                        startingOffsetsByTimestampStrategy="latest")
    assert latest.count() == 0
    # As an ending timestamp, "no match" means latest: everything.
    ending = read_batch(spark, broker.bootstrap, fresh_topic, endingOffsetsByTimestamp=after)
    assert sorted(r.offset for r in ending.collect()) == [0, 1, 2, 3, 4]
