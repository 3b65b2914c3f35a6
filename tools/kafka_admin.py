"""Small admin helpers for tests and benchmarks that talk to any Kafka-compatible broker."""

from __future__ import annotations

import time
from typing import Any


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None,
                 timeout: float = 30.0, replicas: list[int] | None = None) -> None:
    """Create through confluent-kafka's AdminClient and wait until every partition has a leader.
    ``replicas``: every partition on these brokers, led by the first; else one replica, placed by
    the controller."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    placed = (NewTopic(name, num_partitions=partitions, replication_factor=-1, replica_assignment=[list(replicas)] * partitions,
                       config=dict(config or {}))
              if replicas else NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {})))
    futures = admin.create_topics([placed], operation_timeout=timeout)
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



def alter_client_quotas(bootstrap: str, entity: dict[str, str | None], values: dict[str, float | None],
                        timeout: float = 10.0) -> None:
    """AlterClientQuotas v0 (confluent-kafka has no client-quota admin call): set, or with None
    remove, ``values`` of ``entity`` ({"client-id": "x"}, {"user": None} for the default user, ...).
    Raises if the broker refuses."""
    from grete.protocol.messages import AlterClientQuotasRequest

    request = AlterClientQuotasRequest(validate_only=False, entries=[AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[AlterClientQuotasRequest.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
             for k, v in values.items()])])
    for entry in call(bootstrap, request, 0, timeout).entries:
        if entry.error_code:
            raise RuntimeError(f"AlterClientQuotas refused: {entry.error_code} {entry.error_message}")


def describe_client_quotas(bootstrap: str, timeout: float = 10.0) -> dict[tuple[tuple[str, str | None], ...],
                                                                         dict[str, float]]:
    """Every client quota the broker knows (DescribeClientQuotas v0, an empty filter)."""
    from grete.protocol.messages import DescribeClientQuotasRequest

    response = call(bootstrap, DescribeClientQuotasRequest(components=[], strict=False), 0, timeout)
    if response.error_code:
        raise RuntimeError(f"DescribeClientQuotas: {response.error_code} {response.error_message}")
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
            {v.key: v.value for v in entry.values} for entry in response.entries}


def call(bootstrap: str, request: Any, version: int, timeout: float = 10.0, client_id: str = "kafka_admin") -> Any:
    """One request on a fresh connection, to where a client would send it (on a cluster, the leader or
    coordinator it names; else the first bootstrap server); the decoded answer."""
    from grete.protocol.messages import APIS
    from grete.testing.routed_wire import open_wire

    wire = open_wire(bootstrap, timeout, client_id=client_id)
    try:
        return wire.call(request, APIS[request.API_KEY].response, version)
    finally:
        wire.close()
