"""confluent-kafka (librdkafka) transactions: commit/abort, isolation levels, consume-transform-produce
with send_offsets_to_transaction, zombie fencing, the broker's transaction timeout, and the last
stable offset (LSO) as seen by ListOffsets and by read_committed fetches.

Every expectation here is Kafka's documented behaviour (KIP-98 / KIP-447), checked on Apache Kafka
3.9 and 4.3 first; a transaction marker takes one offset, which is why offsets skip after a commit
or an abort.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_helpers import consume_n, consumer, produce_all, producer, wait_until
from confluent_kafka import (
    OFFSET_INVALID,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

pytestmark = pytest.mark.compat

TXN_TIMEOUT = 30.0  # seconds for init/commit/abort calls; bounds the wait on a broker with no coordinator


def txn_producer(bootstrap: str, txn_id: str | None = None, **config: Any) -> Producer:
    """A transactional producer with its transactions initialised (InitProducerId done)."""
    p = producer(bootstrap, **{"transactional.id": txn_id or f"tx-{uuid.uuid4().hex[:10]}", **config})
    p.init_transactions(TXN_TIMEOUT)
    return p


def send(p: Producer, topic: str, values: list[bytes], partition: int = 0) -> None:
    """Produce inside the open transaction and wait for every delivery report."""
    produce_all(p, topic, ({"value": v, "partition": partition} for v in values))


def read_all(bootstrap: str, topic: str, isolation: str, partition: int = 0,
             settle: float = 1.0) -> list[Message]:
    """Everything readable from one partition at ``isolation``: read to the end (librdkafka's EOF event
    marks the high watermark, or the LSO for read_committed), then ``settle`` s more to see nothing comes."""
    c = consumer(bootstrap, **{"isolation.level": isolation, "enable.partition.eof": True})
    got: list[Message] = []
    try:
        c.assign([TopicPartition(topic, partition, 0)])
        deadline = time.monotonic() + 30
        quiet_until = float("inf")
        while time.monotonic() < min(deadline, quiet_until):
            for m in c.consume(num_messages=100, timeout=0.2):
                if m.error() is None:
                    got.append(m)
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    quiet_until = min(quiet_until, time.monotonic() + settle)
                else:
                    raise AssertionError(f"consume error: {m.error()}")
        assert quiet_until != float("inf"), f"never reached the end of {topic}[{partition}]"
        return got
    finally:
        c.close()


def values(messages: list[Message]) -> list[bytes]:
    return [m.value() for m in messages]


def end_offset(bootstrap: str, topic: str, isolation: IsolationLevel, partition: int = 0) -> int:
    """ListOffsets(latest) at an isolation level: the high watermark, or the LSO for read_committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    tp = TopicPartition(topic, partition)
    futures = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=isolation, request_timeout=20)
    return int(futures[tp].result(timeout=30).offset)


def committed_offset(bootstrap: str, group: str, topic: str, partition: int = 0) -> int:
    c = consumer(bootstrap, group)
    try:
        (tp,) = c.committed([TopicPartition(topic, partition)], timeout=20)
        return int(tp.offset)
    finally:
        c.close()


def test_commit_and_abort(broker, make_topic) -> None:
    topic = make_topic()
    p = txn_producer(broker.bootstrap)
    plan = [("commit", 3), ("abort", 2), ("commit", 4)]
    i = 0
    for outcome, n in plan:
        p.begin_transaction()
        send(p, topic, [f"v{j}".encode() for j in range(i, i + n)])
        i += n
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(TXN_TIMEOUT)

    committed = [f"v{j}".encode() for j in (0, 1, 2, 5, 6, 7, 8)]
    assert values(read_all(broker.bootstrap, topic, "read_committed")) == committed
    everything = read_all(broker.bootstrap, topic, "read_uncommitted")
    assert values(everything) == [f"v{j}".encode() for j in range(9)]
    # Each transaction ends with a control record that takes an offset but is never delivered.
    assert [m.offset() for m in everything] == [0, 1, 2, 4, 5, 7, 8, 9, 10]
    assert end_offset(broker.bootstrap, topic, IsolationLevel.READ_UNCOMMITTED) == 12
    assert end_offset(broker.bootstrap, topic, IsolationLevel.READ_COMMITTED) == 12


def test_transaction_over_several_partitions_is_atomic(broker, make_topic) -> None:
    topic = make_topic(partitions=3)
    p = txn_producer(broker.bootstrap)
    p.begin_transaction()
    for part in range(3):
        send(p, topic, [f"kept-{part}".encode()], partition=part)
    p.commit_transaction(TXN_TIMEOUT)
    p.begin_transaction()
    for part in range(3):
        send(p, topic, [f"dropped-{part}".encode()], partition=part)
    p.abort_transaction(TXN_TIMEOUT)
    for part in range(3):
        assert values(read_all(broker.bootstrap, topic, "read_committed", part)) == [
            f"kept-{part}".encode()]
        assert values(read_all(broker.bootstrap, topic, "read_uncommitted", part)) == [
            f"kept-{part}".encode(), f"dropped-{part}".encode()]


def test_consume_transform_produce_offsets_follow_the_transaction(broker, make_topic) -> None:
    src, dst = make_topic(), make_topic()
    n = 10
    produce_all(producer(broker.bootstrap), src, ({"value": f"in-{i}".encode()} for i in range(n)))
    group = f"ctp-{uuid.uuid4().hex[:10]}"
    p = txn_producer(broker.bootstrap)

    def process_once(outcome: str) -> None:
        c = consumer(broker.bootstrap, group, **{"isolation.level": "read_committed"})
        try:
            c.subscribe([src])
            batch = consume_n(c, n)
            p.begin_transaction()
            send(p, dst, [m.value().replace(b"in-", b"out-") for m in batch])
            p.send_offsets_to_transaction([TopicPartition(src, 0, batch[-1].offset() + 1)],
                                          c.consumer_group_metadata(), TXN_TIMEOUT)
            (p.commit_transaction if outcome == "commit" else p.abort_transaction)(TXN_TIMEOUT)
        finally:
            c.close()

    process_once("abort")
    # Aborting discards the offsets with the output: the group has no committed position yet.
    assert committed_offset(broker.bootstrap, group, src) == OFFSET_INVALID
    assert read_all(broker.bootstrap, dst, "read_committed") == []

    process_once("commit")  # a fresh consumer of the group starts from the beginning again
    assert committed_offset(broker.bootstrap, group, src) == n
    assert values(read_all(broker.bootstrap, dst, "read_committed")) == [f"out-{i}".encode() for i in range(n)]
    # The aborted attempt's output is still in the log, visible only to read_uncommitted.
    assert len(read_all(broker.bootstrap, dst, "read_uncommitted")) == 2 * n


def test_second_producer_fences_the_first(broker, make_topic) -> None:
    topic = make_topic()
    txn_id = f"zombie-{uuid.uuid4().hex[:10]}"
    zombie = txn_producer(broker.bootstrap, txn_id)
    zombie.begin_transaction()
    send(zombie, topic, [b"from-zombie"])

    # Same transactional.id: InitProducerId bumps the epoch and aborts the zombie's open transaction.
    fresh = txn_producer(broker.bootstrap, txn_id)
    fresh.begin_transaction()
    send(fresh, topic, [b"from-fresh"])
    fresh.commit_transaction(TXN_TIMEOUT)

    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(TXN_TIMEOUT)
    err = caught.value.args[0]
    assert err.fatal(), f"fencing must be fatal for the zombie, got {err}"
    assert err.code() == KafkaError._FENCED, err

    assert values(read_all(broker.bootstrap, topic, "read_committed")) == [b"from-fresh"]
    assert values(read_all(broker.bootstrap, topic, "read_uncommitted")) == [b"from-zombie", b"from-fresh"]


def test_broker_aborts_a_transaction_that_times_out(broker, make_topic) -> None:
    topic = make_topic()
    # 1 s is librdkafka's minimum; the broker checks for expired transactions every 10 s by default
    # (transaction.abort.timed.out.transaction.cleanup.interval.ms), so allow ~20 s for the abort.
    p = txn_producer(broker.bootstrap, **{"transaction.timeout.ms": 1000})
    p.begin_transaction()
    send(p, topic, [b"expires-1", b"expires-2"])
    # Open, the transaction holds the LSO at 0; a broker that aborts on time (grete's timer fires at
    # the timeout) may already have aborted it on a slow machine: 3.
    assert end_offset(broker.bootstrap, topic, IsolationLevel.READ_COMMITTED) in (0, 3)

    # The broker's abort writes a marker after the two records, which moves the LSO to 3.
    wait_until(lambda: end_offset(broker.bootstrap, topic, IsolationLevel.READ_COMMITTED) == 3, 30,
               what="the broker aborting the expired transaction")
    assert end_offset(broker.bootstrap, topic, IsolationLevel.READ_UNCOMMITTED) == 3
    assert read_all(broker.bootstrap, topic, "read_committed") == []
    with pytest.raises(KafkaException):
        p.commit_transaction(TXN_TIMEOUT)  # the producer's epoch is over


def test_list_offsets_read_committed_stops_at_lso(broker, make_topic) -> None:
    topic = make_topic()
    produce_all(producer(broker.bootstrap), topic, ({"value": f"plain-{i}".encode()} for i in range(2)))
    p = txn_producer(broker.bootstrap)
    p.begin_transaction()
    send(p, topic, [b"t-0", b"t-1", b"t-2"])  # offsets 2..4, transaction open
    assert end_offset(broker.bootstrap, topic, IsolationLevel.READ_UNCOMMITTED) == 5
    assert end_offset(broker.bootstrap, topic, IsolationLevel.READ_COMMITTED) == 2
    p.commit_transaction(TXN_TIMEOUT)
    # The commit marker is offset 5: both ends move past it.
    assert end_offset(broker.bootstrap, topic, IsolationLevel.READ_UNCOMMITTED) == 6
    assert end_offset(broker.bootstrap, topic, IsolationLevel.READ_COMMITTED) == 6


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_open_transaction_blocks_read_committed(broker, make_topic, outcome: str) -> None:
    topic = make_topic()
    produce_all(producer(broker.bootstrap), topic, [{"value": b"before"}])  # offset 0
    p = txn_producer(broker.bootstrap)
    p.begin_transaction()
    send(p, topic, [b"in-txn"])  # offset 1: the first offset of the open transaction
    produce_all(producer(broker.bootstrap), topic, ({"value": f"after-{i}".encode()} for i in range(3)))

    reader = consumer(broker.bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        got = drain(reader, 2.0, want=1)
        # Later non-transactional records sit behind the open transaction's first offset.
        assert values(got) == [b"before"]
        assert values(read_all(broker.bootstrap, topic, "read_uncommitted")) == [
            b"before", b"in-txn", b"after-0", b"after-1", b"after-2"]
        (p.commit_transaction if outcome == "commit" else p.abort_transaction)(TXN_TIMEOUT)
        expected = [b"in-txn"] if outcome == "commit" else []
        expected += [b"after-0", b"after-1", b"after-2"]
        got = drain(reader, 1.0, want=len(expected))
        assert values(got) == expected
    finally:
        reader.close()


def drain(c: Consumer, settle: float, want: int | None = None) -> list[Message]:
    """Poll an assigned consumer until ``want`` records came (then ``settle`` s more, to catch any
    extra), or with ``want`` None until ``settle`` s passed with nothing new."""
    got: list[Message] = []
    quiet_since = time.monotonic()
    deadline = quiet_since + 30
    while time.monotonic() < deadline:
        if want is not None and len(got) >= want:
            break
        if want is None and time.monotonic() - quiet_since >= settle:
            break
        for m in c.consume(num_messages=100, timeout=0.2):
            if m.error() is None:
                got.append(m)
                quiet_since = time.monotonic()
            elif m.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(f"consume error: {m.error()}")
    if want is not None:  # and nothing beyond it
        got += drain(c, settle)
    return got
