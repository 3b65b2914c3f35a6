"""Spark's Kafka source in Structured Streaming (Trigger.AvailableNow, checkpoint restarts, data loss)
and Spark's Kafka sink with its default producer settings."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import drain_available_now, error_text, produce_records, read_topic, values, watermarks

from tools.client_drivers import partition_dir

pytestmark = pytest.mark.slow

DATA_LOSS = "Some data may have been lost"  # the connector's failOnDataLoss message


def out_keys(bootstrap: str, topic: str) -> list[str]:
    return [m.key().decode() for m in read_topic(bootstrap, topic)]


def test_available_now_restart_reads_each_record_once(spark: Any, broker: Any, make_topic: Callable[..., str],
                                                      tmp_path: Path) -> None:
    src, out = make_topic(), make_topic(prefix="out")
    ckpt = str(tmp_path / "ckpt")
    produce_records(broker.bootstrap, src, values(30))
    assert drain_available_now(spark, broker.bootstrap, src, ckpt, out) is None
    assert out_keys(broker.bootstrap, out) == [f"0:{i}" for i in range(30)]

    produce_records(broker.bootstrap, src, values(20, prefix="w"))
    assert drain_available_now(spark, broker.bootstrap, src, ckpt, out) is None
    assert drain_available_now(spark, broker.bootstrap, src, ckpt, out) is None  # nothing new: nothing read
    got = read_topic(broker.bootstrap, out)
    assert [m.key().decode() for m in got] == [f"0:{i}" for i in range(50)]  # none twice, none skipped
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(30)] + [f"w{i}".encode() for i in range(20)]


def test_sink_default_producer_is_idempotent(spark: Any, broker: Any, fresh_topic: str) -> None:
    rows = [(f"k{i}", f"value-{i}") for i in range(200)]
    df = spark.createDataFrame(rows, ["key", "value"]).repartition(2)
    df.write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", fresh_topic).save()
    got = read_topic(broker.bootstrap, fresh_topic)
    assert sorted((m.key().decode(), m.value().decode()) for m in got) == sorted(rows)
    # kafka-clients' defaults (acks=all, enable.idempotence=true) leave their mark in the log: every
    # batch carries a producer id and a sequence number, and none is transactional.
    from grete.protocol.records.batch import iter_batches

    segment = partition_dir(broker.log_dirs, fresh_topic, 0) / "00000000000000000000.log"
    batches = list(iter_batches(segment.read_bytes()))
    assert batches and sum(b.records_count for b in batches) == 200
    assert all(b.producer_id >= 0 and b.base_sequence >= 0 and not b.is_transactional for b in batches)
    assert len({b.producer_id for b in batches}) <= 2  # one pooled producer per task at most


Records = Callable[[int, str], list[dict[str, Any]]]


def _setup_loss(spark: Any, bootstrap: str, src: str, out: str, ckpt: str, lose: Callable[[str], None],
                records: Records = values) -> int:
    """Read 20 records into the checkpoint, add 30 more, lose data below some offset; returns the
    new log start offset."""
    produce_records(bootstrap, src, records(20, "v"))
    assert drain_available_now(spark, bootstrap, src, ckpt, out) is None
    produce_records(bootstrap, src, records(30, "w"))
    lose(src)
    low, _ = watermarks(bootstrap, src)
    assert low > 20, f"log start offset {low} did not move past the checkpoint"
    return low


def _assert_fails_then_continues(spark: Any, bootstrap: str, src: str, out: str, ckpt: str, low: int) -> None:
    err = drain_available_now(spark, bootstrap, src, ckpt, out)
    assert err is not None and DATA_LOSS in error_text(err), error_text(err)[:2000]
    assert out_keys(bootstrap, out) == [f"0:{i}" for i in range(20)]  # nothing written by the failed run
    _, high = watermarks(bootstrap, src)
    assert drain_available_now(spark, bootstrap, src, ckpt, out, failOnDataLoss="false") is None
    assert out_keys(bootstrap, out) == [f"0:{i}" for i in range(20)] + [f"0:{i}" for i in range(low, high)]


def test_fail_on_data_loss_after_delete_records(spark: Any, broker: Any, make_topic: Callable[..., str],
                                                tmp_path: Path) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    def delete_below_40(topic: str) -> None:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        tp = TopicPartition(topic, 0, 40)
        assert admin.delete_records([tp], request_timeout=30)[tp].result(30).low_watermark == 40

    src, out, ckpt = make_topic(), make_topic(prefix="out"), str(tmp_path / "ckpt")
    low = _setup_loss(spark, broker.bootstrap, src, out, ckpt, delete_below_40)
    assert low == 40
    _assert_fails_then_continues(spark, broker.bootstrap, src, out, ckpt, low)


def test_fail_on_data_loss_after_retention(spark: Any, retention_broker: Any, tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    from tools.kafka_admin import create_topic

    bootstrap = retention_broker.bootstrap
    src, out, ckpt = f"ret-{time.time_ns()}", f"ret-out-{time.time_ns()}", str(tmp_path / "ckpt")
    # segment.ms=100: an append more than 100 ms after a segment's first record starts a new segment
    # (the records are an hour old, so every append rolls), and retention can drop all but the
    # active one. retention.ms is only lowered once the checkpoint holds offset 20.
    create_topic(bootstrap, src, config={"segment.ms": "100"})
    create_topic(bootstrap, out)
    hour_ago = int(time.time() * 1000) - 3_600_000

    def old(n: int, prefix: str) -> list[dict[str, Any]]:
        return [{**r, "timestamp": hour_ago} for r in values(n, prefix)]

    def expire(topic: str) -> None:
        time.sleep(0.3)
        produce_records(bootstrap, topic, [{"value": b"fresh"}])  # a recent record in a new active segment
        admin = AdminClient({"bootstrap.servers": bootstrap})
        entry = ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET)
        res = ConfigResource("topic", topic, incremental_configs=[entry])
        for f in admin.incremental_alter_configs([res], request_timeout=30).values():
            f.result(30)
        deadline = time.monotonic() + 30
        while watermarks(bootstrap, topic)[0] <= 20 and time.monotonic() < deadline:
            time.sleep(0.2)

    low = _setup_loss(spark, bootstrap, src, out, ckpt, expire, records=old)
    assert low == 50  # both hour-old segments went, the fresh record's segment stays
    _assert_fails_then_continues(spark, bootstrap, src, out, ckpt, low)
