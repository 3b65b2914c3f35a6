"""Stock clients against a real broker: a consumer group forms, commits, and its offsets survive a
broker restart (read back from the __consumer_offsets log)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from grete.testing import broker

pytestmark = pytest.mark.slow


def _consume(bootstrap: str, group: str, n: int) -> KafkaConsumer:
    consumer = KafkaConsumer("t", bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10_000)
    # Metadata before the first join: kafka-python 3.0.12 can drop the answer to a leader's
    # metadata-triggered rejoin after a poll timeout (compat-tests/kafka-python/FINDINGS.md).
    consumer.partitions_for_topic("t")
    seen = 0
    for _ in consumer:
        seen += 1
        if seen == n:
            break
    assert seen == n
    return consumer


def test_group_offsets_survive_a_broker_restart() -> None:
    with tempfile.TemporaryDirectory(prefix="grete-groups-") as tmp:
        data = Path(tmp)
        with broker(data_dir=data, topics={"t": 2}) as b:
            producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)
            for i in range(20):
                producer.send("t", f"v{i}".encode(), partition=i % 2)
            producer.flush()
            producer.close()
            consumer = _consume(b.bootstrap_servers, "survivors", 20)
            consumer.commit()
            before = {p: consumer.committed(TopicPartition("t", p)) for p in (0, 1)}
            consumer.close()
            assert before == {0: 10, 1: 10}
            described = b.call(lambda: b.broker.group_coordinator.describe_group("survivors"))
            assert described.state in ("Empty", "PreparingRebalance")
        time.sleep(0.1)
        with broker(data_dir=data) as b:
            consumer = KafkaConsumer(bootstrap_servers=b.bootstrap_servers, group_id="survivors",
                                     enable_auto_commit=False)
            after = {p: consumer.committed(TopicPartition("t", p)) for p in (0, 1)}
            consumer.close()
            assert after == before
            listed = b.call(lambda: b.broker.group_coordinator.list_groups(None, None))
            assert [(g.group_id, g.protocol_type) for g in listed] == [("survivors", "consumer")]
