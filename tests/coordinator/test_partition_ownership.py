"""Coordinators serve one internal partition at a time (Kafka's onElection / onResignation): a group
or transactional id whose partition is loading answers COORDINATOR_LOAD_IN_PROGRESS, one whose
partition is not served here NOT_COORDINATOR; unloading drops the partition's state."""

from __future__ import annotations

import asyncio

from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import GroupConfig, OffsetCommit
from grete.coordinator.transactions.txn import TransactionCoordinator
from grete.coordinator.transactions.txn_state import TxnConfig
from grete.protocol.errors import ErrorCode

PARTITIONS = 4


def _config() -> GroupConfig:
    return GroupConfig(group_min_session_timeout_ms=6000, group_max_session_timeout_ms=300000,
                       group_initial_rebalance_delay_ms=0, group_max_size=100,
                       offsets_topic_num_partitions=PARTITIONS, offsets_retention_minutes=10080,
                       offset_metadata_max_bytes=4096, offsets_retention_check_interval_ms=600000)


def _group_on(coordinator: GroupCoordinator, partition: int) -> str:
    return next(g for g in (f"g{i}" for i in range(1000)) if coordinator.partition_for(g) == partition)


async def _commit(coordinator: GroupCoordinator, group: str) -> ErrorCode:
    errors = await coordinator.commit_offsets(group_id=group, generation_id=-1, member_id="", group_instance_id=None,
                                              retention_ms=-1, offsets=[OffsetCommit("t", 0, 42, -1, "")])
    return errors[("t", 0)]


def test_group_partitions_load_and_unload() -> None:
    async def run() -> None:
        store = InMemoryOffsetsStore()
        coordinator = GroupCoordinator(_config(), store)
        here, there = _group_on(coordinator, 1), _group_on(coordinator, 2)
        assert coordinator.status_error(here) is ErrorCode.COORDINATOR_NOT_AVAILABLE  # not started yet
        loading = asyncio.get_running_loop().create_task(coordinator.load_partition(1))
        await asyncio.sleep(0)
        assert coordinator.status_error(here) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert coordinator.status_error(there) is ErrorCode.NOT_COORDINATOR
        await loading
        assert coordinator.status_error(here) is None
        assert coordinator.status_error(there) is ErrorCode.NOT_COORDINATOR
        assert await _commit(coordinator, here) is ErrorCode.NONE
        assert await _commit(coordinator, there) is ErrorCode.NOT_COORDINATOR
        coordinator.unload_partition(1)
        assert here not in coordinator.groups
        assert coordinator.status_error(here) is ErrorCode.NOT_COORDINATOR
        await coordinator.load_partition(1)  # elected again: the commit is read back from the log
        error, offsets = coordinator.fetch_offsets(here, [("t", 0)], False)
        assert error is ErrorCode.NONE and offsets[("t", 0)].offset == 42
        await coordinator.shutdown()

    asyncio.run(run())


def test_load_serves_every_partition() -> None:
    async def run() -> None:
        coordinator = GroupCoordinator(_config(), InMemoryOffsetsStore())
        await coordinator.load()
        assert coordinator.owned_partitions == set(range(PARTITIONS)) and not coordinator.loading_partitions
        assert all(coordinator.status_error(_group_on(coordinator, p)) is None for p in range(PARTITIONS))
        await coordinator.shutdown()

    asyncio.run(run())


class _TxnLog:
    """__transaction_state in memory: records per partition, as the broker's store keeps them."""

    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {}

    def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.records.setdefault(partition, []).append((key, value))

    def read(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        return list(self.records.get(partition, []))

    def coordinator_epoch(self, partition: int) -> int:
        return 0


class _NoMarkers:
    def write_markers(self, *args: object, **kwargs: object) -> None:
        pass


def test_transaction_partitions_load_and_unload() -> None:
    async def run() -> None:
        ids = iter(range(1000, 2000))
        coordinator = TransactionCoordinator(TxnConfig(num_partitions=PARTITIONS), _TxnLog(), _NoMarkers(),
                                             lambda: next(ids))
        here = next(t for t in (f"tx{i}" for i in range(1000)) if coordinator.partition_for(t) == 0)
        there = next(t for t in (f"tx{i}" for i in range(1000)) if coordinator.partition_for(t) == 1)
        assert coordinator.init_producer_id(here, 60000).error is ErrorCode.NOT_COORDINATOR  # not elected
        await coordinator.load_partition(0)
        first = coordinator.init_producer_id(here, 60000)
        assert first.error is ErrorCode.NONE
        assert coordinator.init_producer_id(there, 60000).error is ErrorCode.NOT_COORDINATOR
        coordinator.unload_partition(0)
        assert coordinator.init_producer_id(here, 60000).error is ErrorCode.NOT_COORDINATOR
        await coordinator.load_partition(0)  # the id's producer comes back from the log, epoch bumped on init
        again = coordinator.init_producer_id(here, 60000)
        assert (again.error, again.producer_id, again.producer_epoch) == (
            ErrorCode.NONE, first.producer_id, first.producer_epoch + 1)
        coordinator.shutdown()

    asyncio.run(run())
