"""kafka-python (3.x has a transactional producer: init/begin/commit/abort_transaction and
send_offsets_to_transaction with the consumer's group_metadata) against the broker: commit and
abort, isolation levels, consume-transform-produce, zombie fencing, the broker's transaction
timeout, and the last stable offset seen through end_offsets and read_committed fetches."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from kafka_python_helpers import consumer, producer, subscribe, take, unique, wait_until

pytestmark = pytest.mark.compat


def txn_producer(bootstrap: str, txn_id: str | None = None, **config: Any) -> KafkaProducer:
    # max_block_ms bounds init_transactions() when no transaction coordinator answers.
    p = producer(bootstrap, transactional_id=txn_id or unique("kptx"), max_block_ms=30_000, **config)
    p.init_transactions()
    return p


def send(p: KafkaProducer, topic: str, values: list[bytes], partition: int = 0) -> None:
    for v in values:
        p.send(topic, value=v, partition=partition)
    p.flush(30)


def read_all(bootstrap: str, topic: str, isolation: str, settle: float = 1.0) -> list[Any]:
    """Every record of partition 0 readable at ``isolation``: up to the end offset at that level (the
    LSO for read_committed), then ``settle`` s more to see that nothing else comes."""
    c = consumer(bootstrap, isolation_level=isolation)
    got: list[Any] = []
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        end = c.end_offsets([tp])[tp]
        deadline = time.monotonic() + 30
        quiet_until = float("inf")
        while time.monotonic() < min(deadline, quiet_until):
            for records in c.poll(timeout_ms=200).values():
                got.extend(records)
            if quiet_until == float("inf") and c.position(tp) >= end:
                quiet_until = time.monotonic() + settle
        assert quiet_until != float("inf"), f"position {c.position(tp)} never reached the end {end}"
        return got
    finally:
        c.close()


def end_offset(bootstrap: str, topic: str, isolation: str) -> int:
    c = consumer(bootstrap, isolation_level=isolation)
    try:
        tp = TopicPartition(topic, 0)
        return int(c.end_offsets([tp])[tp])
    finally:
        c.close()


def test_commit_and_abort(broker, make_topic) -> None:
    topic = make_topic()
    p = txn_producer(broker.bootstrap)
    i = 0
    for outcome, n in [("commit", 3), ("abort", 2), ("commit", 4)]:
        p.begin_transaction()
        send(p, topic, [f"v{j}".encode() for j in range(i, i + n)])
        i += n
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)()
    p.close()
    assert [r.value for r in read_all(broker.bootstrap, topic, "read_committed")] == [
        f"v{j}".encode() for j in (0, 1, 2, 5, 6, 7, 8)]
    everything = read_all(broker.bootstrap, topic, "read_uncommitted")
    assert [r.value for r in everything] == [f"v{j}".encode() for j in range(9)]
    assert [r.offset for r in everything] == [0, 1, 2, 4, 5, 7, 8, 9, 10]  # markers take 3, 6, 11


def test_consume_transform_produce_with_group_metadata(broker, make_topic) -> None:
    src, dst = make_topic(), make_topic()
    n = 6
    plain = producer(broker.bootstrap)
    for i in range(n):
        plain.send(src, value=f"in-{i}".encode(), partition=0)
    plain.flush(30)
    plain.close()
    group = unique("kpctp")
    p = txn_producer(broker.bootstrap)
    tp = TopicPartition(src, 0)
    for outcome in ("abort", "commit"):
        c = consumer(broker.bootstrap, group_id=group, isolation_level="read_committed")
        try:
            subscribe(c, [src])
            batch = take(c, n)
            p.begin_transaction()
            send(p, dst, [r.value.replace(b"in-", b"out-") for r in batch])
            p.send_offsets_to_transaction({tp: OffsetAndMetadata(batch[-1].offset + 1, "", -1)}, c.group_metadata())
            (p.commit_transaction if outcome == "commit" else p.abort_transaction)()
            # Offsets sent with an aborted transaction are discarded along with its records.
            assert c.committed(tp) == (n if outcome == "commit" else None)
        finally:
            c.close()
    p.close()
    assert [r.value for r in read_all(broker.bootstrap, dst, "read_committed")] == [
        f"out-{i}".encode() for i in range(n)]
    assert len(read_all(broker.bootstrap, dst, "read_uncommitted")) == 2 * n


def test_second_producer_fences_the_first(broker, make_topic) -> None:
    topic = make_topic()
    txn_id = unique("kpzombie")
    zombie = txn_producer(broker.bootstrap, txn_id)
    zombie.begin_transaction()
    send(zombie, topic, [b"from-zombie"])
    fresh = txn_producer(broker.bootstrap, txn_id)
    fresh.begin_transaction()
    send(fresh, topic, [b"from-fresh"])
    fresh.commit_transaction()
    fresh.close()
    with pytest.raises(KafkaError) as caught:
        zombie.commit_transaction()
    assert type(caught.value).__name__ in ("ProducerFencedError", "InvalidProducerEpochError"), caught.value
    zombie.close(timeout=5)
    assert [r.value for r in read_all(broker.bootstrap, topic, "read_committed")] == [b"from-fresh"]


def test_broker_aborts_a_transaction_that_times_out(broker, make_topic) -> None:
    topic = make_topic()
    p = txn_producer(broker.bootstrap, transaction_timeout_ms=1000)
    p.begin_transaction()
    send(p, topic, [b"expires-1", b"expires-2"])
    assert end_offset(broker.bootstrap, topic, "read_committed") == 0
    # The broker's abort marker (offset 2) moves the LSO past the two records.
    wait_until(lambda: end_offset(broker.bootstrap, topic, "read_committed") == 3, 30,
               what="the broker aborting the expired transaction")
    assert read_all(broker.bootstrap, topic, "read_committed") == []
    with pytest.raises(KafkaError):
        p.commit_transaction()
    p.close(timeout=5)


def test_end_offsets_read_committed_stop_at_lso(broker, make_topic) -> None:
    topic = make_topic()
    plain = producer(broker.bootstrap)
    send(plain, topic, [b"plain-0", b"plain-1"])
    plain.close()
    p = txn_producer(broker.bootstrap)
    p.begin_transaction()
    send(p, topic, [b"t-0", b"t-1", b"t-2"])
    assert end_offset(broker.bootstrap, topic, "read_uncommitted") == 5
    assert end_offset(broker.bootstrap, topic, "read_committed") == 2
    p.commit_transaction()
    p.close()
    assert end_offset(broker.bootstrap, topic, "read_committed") == 6


def test_open_transaction_blocks_read_committed(broker, make_topic) -> None:
    topic = make_topic()
    plain = producer(broker.bootstrap)
    send(plain, topic, [b"before"])
    p = txn_producer(broker.bootstrap)
    p.begin_transaction()
    send(p, topic, [b"in-txn"])
    send(plain, topic, [b"after-0", b"after-1"])
    reader: KafkaConsumer = consumer(broker.bootstrap, isolation_level="read_committed")
    try:
        tp = TopicPartition(topic, 0)
        reader.assign([tp])
        reader.seek_to_beginning(tp)
        got = [r.value for r in take(reader, 1)]
        time.sleep(2.0)
        got += [r.value for records in reader.poll(timeout_ms=500).values() for r in records]
        assert got == [b"before"]  # the open transaction's first offset holds back the later records
        p.commit_transaction()
        assert [r.value for r in take(reader, 3)] == [b"in-txn", b"after-0", b"after-1"]
    finally:
        reader.close()
        p.close()
        plain.close()
