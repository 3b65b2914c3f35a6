"""The pipeline's topics through plain clients (confluent-kafka): creating them to fit the cluster,
their offsets, and reading an exact offset range back as a downstream consumer would."""

from __future__ import annotations

import time
from dataclasses import dataclass

Ranges = dict[int, tuple[int, int]]  # {partition: (first offset, offset after the last)}

# CreateTopics' "use the broker's default.replication.factor" (KIP-464).
CLUSTER_DEFAULT_RF = -1
RETRY_BACKOFF_S = 0.1  # kafka-clients' retry.backoff.ms


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes
    value: bytes
    timestamp_ms: int


def ensure_topics(bootstrap: str, topics: dict[str, dict[str, str]], partitions: int = 1,
                  replication_factor: int = CLUSTER_DEFAULT_RF, min_insync: int | None = None) -> list[str]:
    """Create the topics that do not exist yet with the given configs; returns the names created.

    By default the cluster decides: replication factor -1 takes the broker's
    ``default.replication.factor`` and no ``min.insync.replicas`` config leaves the broker's."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    have = set(admin.list_topics(timeout=10).topics)
    extra = {} if min_insync is None else {"min.insync.replicas": str(min_insync)}
    new = [NewTopic(t, num_partitions=partitions, replication_factor=replication_factor, config={**c, **extra})
           for t, c in topics.items() if t not in have]
    for future in admin.create_topics(new, operation_timeout=30).values() if new else ():
        future.result(timeout=30)
    return [t.topic for t in new]


def end_offsets(bootstrap: str, topic: str, timeout: float = 30.0) -> Ranges:
    """{partition: (log start, high watermark)} through a plain consumer.

    A topic just created may not have its leaders in place yet (NOT_LEADER_OR_FOLLOWER, retriable;
    confluent-kafka does not flag it so): like Kafka's clients, retry after ``RETRY_BACKOFF_S`` until
    ``timeout``."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    not_ready = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART}

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "traffic-offsets", "enable.auto.commit": False})
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                parts = c.list_topics(topic, timeout=10).topics[topic].partitions
                return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
            except KafkaException as exc:
                if exc.args[0].code() not in not_ready or time.monotonic() > deadline:
                    raise
            time.sleep(RETRY_BACKOFF_S)
    finally:
        c.close()


def run_ranges(before: Ranges, after: Ranges) -> Ranges:
    """The offsets written between two ``end_offsets`` snapshots, per partition."""
    return {p: (before.get(p, (0, 0))[1], hw) for p, (_, hw) in after.items()}


def read_range(bootstrap: str, topic: str, ranges: Ranges, timeout: float = 60.0) -> list[Record]:
    """Every record with start <= offset < end of each partition, in offset order per partition."""
    from confluent_kafka import Consumer, TopicPartition

    todo = {p: r for p, r in ranges.items() if r[1] > r[0]}
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "traffic-reader", "enable.auto.commit": False})
    got: list[Record] = []
    try:
        c.assign([TopicPartition(topic, p, start) for p, (start, _) in todo.items()])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: not read to the end within {timeout}s: {sorted(todo)} left")
            # consume() returns when it has num_messages or its timeout passed: keep the latter short.
            msgs = c.consume(num_messages=1000, timeout=0.5)
            for m in msgs:
                p, offset = m.partition(), m.offset()
                if m.error() is not None or p not in todo or offset is None:
                    continue
                if offset < todo[p][1]:
                    got.append(Record(p, offset, m.key() or b"", m.value() or b"", m.timestamp()[1]))
                if offset + 1 >= todo[p][1]:  # at or past the end (past it: a gap at the end)
                    del todo[p]
                    c.incremental_unassign([TopicPartition(topic, p)])
    finally:
        c.close()
    return got
