"""Replica placement for new topics and partitions, by Kafka's rules (AdminUtils): the first replica
of each partition goes round the brokers from a random start, the others follow at a shift that
grows every time the partitions have gone round once, so leaders and followers both spread evenly.
With a rack on every broker, brokers are first ordered to alternate racks, so a partition's
replicas land on different racks whenever there are enough of them.
"""

from __future__ import annotations

import random

from grete.coordinator.zookeeper.zk_layout import BrokerInfo


def rack_alternated(brokers: list[BrokerInfo]) -> list[int]:
    """Broker ids taking one broker per rack in turn (racks in name order, brokers in id order)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers, key=lambda b: b.id):
        by_rack.setdefault(b.rack or "", []).append(b.id)
    ordered: list[int] = []
    queues = [by_rack[r] for r in sorted(by_rack)]
    while any(queues):
        for queue in queues:
            if queue:
                ordered.append(queue.pop(0))
    return ordered


def assign_replicas(brokers: list[BrokerInfo], partitions: int, replication: int, first_partition: int = 0,
                    *, start: int | None = None) -> dict[int, list[int]]:
    """{partition: replicas} for ``partitions`` partitions numbered from ``first_partition``."""
    racks = {b.rack for b in brokers}
    if None in racks or len(racks) < 2:
        return _assign(sorted(b.id for b in brokers), partitions, replication, first_partition, start)
    return _assign_rack_aware(brokers, partitions, replication, first_partition, start)


def _assign(ids: list[int], partitions: int, replication: int, first_partition: int,
            start: int | None) -> dict[int, list[int]]:
    n = len(ids)
    if n == 0:
        return {}
    rng = random.Random()
    start_index = rng.randrange(n) if start is None else start
    shift = rng.randrange(n) if start is None else start
    assignment: dict[int, list[int]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [ids[first]]
        for j in range(replication - 1):
            replicas.append(ids[_replica_index(first, shift, j, n)])
        assignment[partition] = replicas
    return assignment


def _assign_rack_aware(brokers: list[BrokerInfo], partitions: int, replication: int, first_partition: int,
                       start: int | None) -> dict[int, list[int]]:
    """Kafka's assignReplicasToBrokersRackAware: each further replica is the next broker in the
    rack-alternated order whose rack (until every rack has one) and whose id are not taken yet."""
    rack_of = {b.id: b.rack for b in brokers}
    ids = rack_alternated(brokers)
    n, racks = len(ids), len(set(rack_of.values()))
    rng = random.Random()
    start_index = rng.randrange(n) if start is None else start
    shift = rng.randrange(n) if start is None else start
    assignment: dict[int, list[int]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [ids[first]]
        taken_racks = {rack_of[ids[first]]}
        k = 0
        for _ in range(min(replication, n) - 1):
            while True:
                broker = ids[_replica_index(first, shift * racks, k, n)]
                k += 1
                if ((rack_of[broker] not in taken_racks or len(taken_racks) == racks)
                        and (broker not in replicas or len(replicas) == n)):
                    replicas.append(broker)
                    taken_racks.add(rack_of[broker])
                    break
        assignment[partition] = replicas
    return assignment


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n
