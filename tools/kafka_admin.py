"""Small admin helpers for tests and benchmarks that talk to any Kafka-compatible broker."""

from __future__ import annotations

import time


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                 timeout: float = 30.0) -> None:
    """Create through confluent-kafka's AdminClient and wait until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=dict(config or {}))], operation_timeout=timeout)
    futures[name].result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=name, timeout=5)
        t = md.topics.get(name)
        if t is not None and t.error is None and len(t.partitions) == partitions and \
                all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.05)
    raise TimeoutError(f"topic {name} has no leaders after {timeout}s")
