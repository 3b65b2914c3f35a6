"""A partition's change as the KRaft controller decides it (grete/broker/quorum/partition_change.py):
the ISR, the election, and eligible leader replicas (KIP-966) with Kafka 4.3's rules, step by step
through a partition losing its replicas and getting them back."""

from __future__ import annotations

import uuid

from grete.broker.quorum.partition_change import NO_CHANGE, Election, PartitionChange
from grete.coordinator.metadata import PartitionMeta
from grete.protocol.metadata import PartitionChangeRecord

TOPIC = uuid.uuid4()


def part(leader: int, isr: list[int], elr: list[int] | None = None, last_known: list[int] | None = None,
         replicas: list[int] | None = None) -> PartitionMeta:
    return PartitionMeta(leader, 5, replicas or [1, 2, 3], isr, elr=elr or [], last_known_elr=last_known or [])


def change(p: PartitionMeta, alive: set[int], *, elr: bool = True, min_isr: int = 2, **kwargs: object
           ) -> PartitionChangeRecord | None:
    return PartitionChange(p, TOPIC, 0, alive.__contains__, min_isr, elr, **kwargs).build()  # type: ignore[arg-type]


def fields(record: PartitionChangeRecord | None) -> dict[str, object] | None:
    if record is None:
        return None
    return {k: v for k, v in {"leader": record.leader, "isr": record.isr, "elr": record.eligible_leader_replicas,
                              "last_known": record.last_known_elr}.items() if v is not None}


def apply(p: PartitionMeta, record: PartitionChangeRecord | None) -> PartitionMeta:
    """The partition after ``record``, as the metadata store applies it."""
    if record is None:
        return p
    return PartitionMeta(p.leader if record.leader == NO_CHANGE else record.leader, p.leader_epoch, p.replicas,
                         p.isr if record.isr is None else record.isr,
                         elr=p.elr if record.eligible_leader_replicas is None else record.eligible_leader_replicas,
                         last_known_elr=p.last_known_elr if record.last_known_elr is None else record.last_known_elr)


def test_without_elr_the_last_isr_member_stays_and_the_partition_goes_offline() -> None:
    record = change(part(1, [1]), {2, 3}, elr=False, target_isr=[])
    assert fields(record) == {"leader": -1}


def test_a_partition_losing_its_replicas_and_getting_them_back() -> None:
    alive = {1, 2, 3}
    p = part(1, [1, 2, 3])
    # Down to the minimum: nothing is eligible beyond the ISR.
    record = change(p, alive, target_isr=[1, 2])
    assert fields(record) == {"leader": -2, "isr": [1, 2]}
    p = apply(p, record)
    # Below it: the replica that leaves is eligible (the high watermark has not moved since).
    record = change(p, alive - {2}, target_isr=[1])
    assert fields(record) == {"leader": -2, "isr": [1], "elr": [2]}
    p = apply(p, record)
    # The leader is fenced: the ISR may become empty; the new leader comes from the ELR.
    alive = {2, 3}
    record = change(p, alive, target_isr=[])
    assert fields(record) == {"leader": 2, "isr": [2], "elr": [1]}
    # Had 2 been down too: no leader, both eligible, the last leader remembered once.
    record = change(p, {3}, target_isr=[])
    assert fields(record) == {"leader": -1, "isr": [], "elr": [1, 2], "last_known": [1]}
    offline = apply(p, record)
    assert change(offline, {3}) is None  # nothing to elect from: unchanged
    # 2 comes back: it leads, alone in the ISR; the last known leader is forgotten.
    record = change(offline, {2, 3})
    assert fields(record) == {"leader": 2, "isr": [2], "elr": [1], "last_known": []}
    p = apply(offline, record)
    # The ISR back at the minimum clears the ELR.
    record = change(p, {1, 2, 3}, target_isr=[2, 1])
    assert fields(record) == {"leader": -2, "isr": [2, 1], "elr": []}


def test_the_last_known_leader_leads_again_once_it_is_back() -> None:
    p = part(-1, [], elr=[], last_known=[1])
    assert change(p, {2, 3}) is None  # not before
    record = change(p, {1, 2, 3})
    assert fields(record) == {"leader": 1, "isr": [1], "last_known": []}


def test_an_unclean_shutdown_leaves_the_elr() -> None:
    p = part(1, [1], elr=[2, 3])
    record = change(p, {1, 2, 3}, target_isr=[1], unclean_shutdown=[2])
    assert fields(record) == {"leader": -2, "elr": [3]}
    record = change(part(-1, [], elr=[2, 3]), {2, 3}, unclean_shutdown=[2], target_isr=[])
    assert fields(record) == {"leader": 3, "isr": [3], "elr": []}


def test_preferred_and_unclean_elections() -> None:
    record = change(part(2, [1, 2]), {1, 2, 3}, election=Election.PREFERRED)
    assert fields(record) == {"leader": 1}
    assert change(part(2, [2]), {1, 2, 3}, election=Election.PREFERRED) is None  # 1 is not in sync: 2 stays
    # Unclean: any live replica, the ISR that replica alone, the ELR cleared.
    record = change(part(-1, [1], elr=[]), {3}, elr=False, election=Election.UNCLEAN)
    assert fields(record) == {"leader": 3, "isr": [3]}
    record = change(part(-1, [], elr=[1], last_known=[]), {3}, election=Election.UNCLEAN)
    assert fields(record) == {"leader": 3, "isr": [3], "elr": []}


def test_min_isr_above_the_replication_factor_is_the_callers_to_cap() -> None:
    """The builder takes the effective min ISR; a single replica with min ISR 1 never has an ELR."""
    p = part(1, [1], replicas=[1])
    assert change(p, {1}, min_isr=1, target_isr=[1]) is None
