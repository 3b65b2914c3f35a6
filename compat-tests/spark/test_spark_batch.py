"""Spark's Kafka source as a batch query: exact offset ranges, start by timestamp, headers, and
minPartitions splitting one partition across several tasks."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from spark_helpers import produce_records, read_batch, values

pytestmark = pytest.mark.slow


def test_exact_offset_range_one_partition(spark: Any, broker: Any, fresh_topic: str) -> None:
    produce_records(broker.bootstrap, fresh_topic, values(50))
    df = read_batch(spark, broker.bootstrap, fresh_topic,
                    startingOffsets=json.dumps({fresh_topic: {"0": 10}}),
                    endingOffsets=json.dumps({fresh_topic: {"0": 35}}))
    rows = df.orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(10, 35))
    assert [bytes(r.value) for r in rows] == [f"v{i}".encode() for i in range(10, 35)]
    assert [bytes(r.key) for r in rows] == [f"k{i}".encode() for i in range(10, 35)]
    assert {r.topic for r in rows} == {fresh_topic} and {r.partition for r in rows} == {0}


def test_exact_offset_ranges_three_partitions(spark: Any, broker: Any, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=3)
    for p in range(3):
        produce_records(broker.bootstrap, topic, [{"value": f"p{p}-{i}".encode(), "partition": p} for i in range(20)])
    # -2 = earliest, -1 = latest, as Spark's JSON offsets define them.
    start = {topic: {"0": -2, "1": 5, "2": 19}}
    end = {topic: {"0": 3, "1": -1, "2": 20}}
    df = read_batch(spark, broker.bootstrap, topic, startingOffsets=json.dumps(start), endingOffsets=json.dumps(end))
    got = sorted((r.partition, r.offset, bytes(r.value).decode()) for r in df.collect())
    want = ([(0, i, f"p0-{i}") for i in range(0, 3)] + [(1, i, f"p1-{i}") for i in range(5, 20)]
            + [(2, 19, "p2-19")])
    assert got == want


def test_starting_offsets_by_timestamp(spark: Any, broker: Any, fresh_topic: str) -> None:
    # Recent CreateTime timestamps one second apart (old ones would fall to the 7-day retention).
    base = int(time.time() * 1000) - 60_000
    produce_records(broker.bootstrap, fresh_topic,
                    [{"value": f"v{i}".encode(), "timestamp": base + i * 1000} for i in range(10)])
    df = read_batch(spark, broker.bootstrap, fresh_topic,
                    startingOffsetsByTimestamp=json.dumps({fresh_topic: {"0": base + 4500}}))
    rows = df.orderBy("offset").collect()
    assert [r.offset for r in rows] == [5, 6, 7, 8, 9]  # first record with timestamp >= the one asked
    assert [int(r.timestamp.timestamp() * 1000) for r in rows] == [base + i * 1000 for i in range(5, 10)]
    assert {r.timestampType for r in rows} == {0}  # CreateTime
    exact = read_batch(spark, broker.bootstrap, fresh_topic,
                       startingOffsetsByTimestamp=json.dumps({fresh_topic: {"0": base + 3000}}),
                       endingOffsetsByTimestamp=json.dumps({fresh_topic: {"0": base + 6000}}))
    assert sorted(r.offset for r in exact.collect()) == [3, 4, 5]


def test_include_headers(spark: Any, broker: Any, fresh_topic: str) -> None:
    headers = [[("trace", b"abc"), ("trace", b"def"), ("empty", b"")], [], [("bin", bytes(range(256)))]]
    produce_records(broker.bootstrap, fresh_topic,
                    [{"value": f"v{i}".encode(), "headers": h} for i, h in enumerate(headers)])
    rows = read_batch(spark, broker.bootstrap, fresh_topic, includeHeaders="true").orderBy("offset").collect()
    got = [[(h.key, bytes(h.value)) for h in (r.headers or [])] for r in rows]
    assert got == [list(h) for h in headers]  # order and duplicate keys preserved
    plain = read_batch(spark, broker.bootstrap, fresh_topic)
    assert "headers" not in plain.columns


def test_min_partitions_splits_one_partition(spark: Any, broker: Any, fresh_topic: str) -> None:
    produce_records(broker.bootstrap, fresh_topic, values(400))
    df = read_batch(spark, broker.bootstrap, fresh_topic, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    # Each task reads its own slice of the one Kafka partition through its own consumer.
    per_task = df.rdd.mapPartitions(lambda rows: [sorted(r.offset for r in rows)]).collect()
    assert len(per_task) == 4 and all(per_task)
    flat = [o for part in per_task for o in part]
    assert sorted(flat) == list(range(400))  # nothing read twice, nothing skipped
    assert all(max(a) < min(b) for a, b in zip(per_task, per_task[1:], strict=False))  # contiguous slices
