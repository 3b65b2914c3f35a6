"""Replica placement for new partitions (grete/broker/cluster/placement.py): with racks, a
partition's replicas take as many racks as there are (Kafka's rack-aware assignment), and leaders
and replicas spread evenly; without racks, Kafka's plain round robin."""

from __future__ import annotations

from collections import Counter

from grete.broker.cluster.placement import assign_replicas
from grete.coordinator.zookeeper.zk_layout import BrokerInfo


def brokers(racks: dict[int, str | None]) -> list[BrokerInfo]:
    return [BrokerInfo(b, (), rack, 0) for b, rack in racks.items()]


def test_replicas_take_every_rack_they_can() -> None:
    two_hosts = brokers({1: "a", 2: "a", 11: "b", 12: "b"})
    racks = {b.id: b.rack for b in two_hosts}
    for start in range(4):  # every start and shift the random draw can give
        assignment = assign_replicas(two_hosts, 12, 2, start=start)
        assert all({racks[r] for r in replicas} == {"a", "b"} for replicas in assignment.values()), assignment
        assert all(len(set(replicas)) == 2 for replicas in assignment.values())
        assert Counter(replicas[0] for replicas in assignment.values()) == {1: 3, 2: 3, 11: 3, 12: 3}
    three = brokers({1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"})
    racks3 = {b.id: b.rack for b in three}
    for start in range(6):
        for replicas in assign_replicas(three, 30, 3, start=start).values():
            assert sorted(racks3[r] or "" for r in replicas) == ["a", "b", "c"]
    # More replicas than racks: every rack first, then other brokers, never one twice.
    for replicas in assign_replicas(two_hosts, 8, 3).values():
        assert len(set(replicas)) == 3 and {racks[r] for r in replicas} == {"a", "b"}


def test_without_racks_the_plain_round_robin() -> None:
    assignment = assign_replicas(brokers({1: None, 2: None, 3: None}), 3, 2, start=0)
    assert assignment == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
