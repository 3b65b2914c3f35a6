"""kafka-transactions: list, describe, describe-producers, find-hanging, and abort of an open
transaction (DescribeProducers + WriteTxnMarkers), which unblocks read_committed consumers."""

from __future__ import annotations

import uuid

from confluent_kafka import IsolationLevel, Producer, TopicPartition  # noqa: I001
from confluent_kafka.admin import AdminClient


def latest(bootstrap: str, topic: str, read_committed: bool) -> int:
    from confluent_kafka.admin import OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level)[tp].result(30).offset


def test_list_describe_and_abort_an_open_transaction(kafka_cli, broker, fresh_topic):
    txn_id = f"cli-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(fresh_topic, f"open-{i}".encode(), partition=0)
    p.flush(30)
    assert latest(broker.bootstrap, fresh_topic, read_committed=True) == 0

    listed = kafka_cli.ok("kafka-transactions", "list")
    row = next(line for line in listed.splitlines() if txn_id in line)
    assert "Ongoing" in row
    described = kafka_cli.ok("kafka-transactions", "describe", "--transactional-id", txn_id)
    assert "Ongoing" in described and fresh_topic in described
    producers = kafka_cli.ok("kafka-transactions", "describe-producers", "--topic", fresh_topic,
                             "--partition", "0")
    assert "0" in producers.splitlines()[-1]  # CurrentTransactionStartOffset of the open transaction

    kafka_cli.ok("kafka-transactions", "abort", "--topic", fresh_topic, "--partition", "0", "--start-offset", "0")
    # The marker ends the transaction in the partition: read_committed consumers move on.
    assert latest(broker.bootstrap, fresh_topic, read_committed=True) == latest(
        broker.bootstrap, fresh_topic, read_committed=False)
