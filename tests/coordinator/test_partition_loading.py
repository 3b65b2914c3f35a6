"""Per-partition load and unload (Kafka's onElection / onResignation) and what each API answers for a
key whose partition is loading (COORDINATOR_LOAD_IN_PROGRESS, or Kafka's special cases) or is not
served here (NOT_COORDINATOR)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import LeaveMember, OffsetCommit
from grete.coordinator.groups.offsets_format import OffsetValue, encode_offset_key, encode_offset_value
from grete.coordinator.transactions.txn import TransactionCoordinator
from grete.coordinator.transactions.txn_state import TopicPartition, TxnConfig
from grete.coordinator.transactions.txn_state_manager import LOAD_CHUNK
from grete.protocol.errors import ErrorCode
from tests.coordinator._support import async_test, config, heartbeat, join, settle, stable_group, sync, task

PARTITIONS = 4


def _key_on(partition: int, partition_for: Callable[[str], int], prefix: str) -> str:
    return next(k for k in (f"{prefix}{i}" for i in range(1000)) if partition_for(k) == partition)


def _coordinator(store: InMemoryOffsetsStore | None = None) -> GroupCoordinator:
    return GroupCoordinator(config(offsets_topic_num_partitions=PARTITIONS), store or InMemoryOffsetsStore())


async def _group_errors(coord: GroupCoordinator, group: str) -> dict[str, ErrorCode]:
    """The error every group API answers for ``group`` right now (none of them waits here)."""
    commit = await coord.commit_offsets(group_id=group, generation_id=-1, member_id="", group_instance_id=None,
                                        retention_ms=-1, offsets=[OffsetCommit("t", 0, 1)])
    txn_commit = await coord.commit_txn_offsets(group_id=group, producer_id=1, producer_epoch=0, generation_id=-1,
                                                member_id="", group_instance_id=None,
                                                offsets=[OffsetCommit("t", 0, 1)])
    synced = await coord.sync_group(group_id=group, generation_id=1, member_id="m", group_instance_id=None,
                                    protocol_type=None, protocol_name=None, assignments=[])
    return {
        "JoinGroup": (await join(coord, group)).error,
        "SyncGroup": synced.error,
        "Heartbeat": await heartbeat(coord, "m", 1, group),
        "LeaveGroup": (await coord.leave_group(group_id=group, members=[LeaveMember("m")]))[0],
        "OffsetCommit": commit[("t", 0)],
        "TxnOffsetCommit": txn_commit[("t", 0)],
        "OffsetFetch": coord.fetch_offsets(group, None)[0],
        "OffsetDelete": (await coord.delete_offsets(group, [("t", 0)]))[0],
        "DescribeGroups": coord.describe_group(group).error,
        "DeleteGroups": (await coord.delete_groups([group]))[group],
    }


LOADING = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


@async_test
async def test_each_group_api_answers_as_kafka_while_loading_and_when_not_coordinator() -> None:
    coord = _coordinator()
    here = _key_on(1, coord.partition_for, "g")
    there = _key_on(2, coord.partition_for, "g")
    loading = task(coord.load_partition(1, 0))
    await asyncio.sleep(0)
    assert coord.loading_partitions == {1}
    # Kafka's GroupCoordinator: SyncGroup says REBALANCE_IN_PROGRESS (the rebalance was lost with the
    # old coordinator; old clients do not know LOAD_IN_PROGRESS there), Heartbeat passes blindly.
    assert await _group_errors(coord, here) == {
        "JoinGroup": LOADING, "SyncGroup": ErrorCode.REBALANCE_IN_PROGRESS, "Heartbeat": ErrorCode.NONE,
        "LeaveGroup": LOADING, "OffsetCommit": LOADING, "TxnOffsetCommit": LOADING, "OffsetFetch": LOADING,
        "OffsetDelete": LOADING, "DescribeGroups": LOADING, "DeleteGroups": LOADING}
    assert coord.availability_error() is LOADING  # ListGroups: the listing may be incomplete
    assert set((await _group_errors(coord, there)).values()) == {ErrorCode.NOT_COORDINATOR}
    await loading
    assert coord.loading_partitions == set() and coord.owned_partitions == {1}
    assert coord.availability_error() is ErrorCode.NONE
    await coord.shutdown()
    assert set((await _group_errors(coord, here)).values()) == {ErrorCode.COORDINATOR_NOT_AVAILABLE}


@async_test
async def test_unloading_answers_parked_requests_and_cancels_timers() -> None:
    coord = _coordinator()
    await coord.load()
    partition = coord.partition_for("g")
    first = (await stable_group(coord, 1))[0]
    group = coord.groups["g"]
    member = group.members[first.member_id]
    session_timer = member.session_timer
    newcomer = task(join(coord))  # parks: the group prepares a rebalance and waits for the first member
    await settle()
    assert group.state.value == "PreparingRebalance" and group.join_timer is not None
    join_timer = group.join_timer
    coord.unload_partition(partition)
    assert (await newcomer).error is ErrorCode.NOT_COORDINATOR
    assert session_timer is not None and session_timer.cancelled() and join_timer.cancelled()
    assert "g" not in coord.groups
    assert (await join(coord)).error is ErrorCode.NOT_COORDINATOR
    await coord.shutdown()


@async_test
async def test_unloading_answers_a_parked_sync() -> None:
    coord = _coordinator()
    await coord.load()
    a, b = await asyncio.gather(join(coord), join(coord))
    follower = a if a.leader != a.member_id else b
    parked = task(sync(coord, follower))
    await settle()
    coord.unload_partition(coord.partition_for("g"))
    assert (await parked).error is ErrorCode.NOT_COORDINATOR
    await coord.shutdown()


@async_test
async def test_a_resignation_during_the_load_abandons_it() -> None:
    store = InMemoryOffsetsStore()
    coord = _coordinator(store)
    partition = coord.partition_for("g")
    # Enough records that the load yields to the loop in the middle of the partition.
    store.partitions[partition] = [(encode_offset_key("g", "t", i), encode_offset_value(OffsetValue(i)))
                                   for i in range(3 * LOAD_CHUNK)]
    loading = task(coord.load_partition(partition, 3))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert partition in coord.loading_partitions
    coord.unload_partition(partition, 3)
    await loading
    assert partition not in coord.owned_partitions and not coord.loading_partitions and not coord.groups
    assert coord.status_error("g") is ErrorCode.NOT_COORDINATOR
    await coord.load_partition(partition, 4)  # elected again: everything is read back
    assert len(coord.fetch_offsets("g", None)[1]) == 3 * LOAD_CHUNK
    await coord.shutdown()


@async_test
async def test_stale_elections_and_resignations_are_ignored() -> None:
    coord = _coordinator()
    await coord.load_partition(1, 5)
    coord.unload_partition(1, 4)  # from before the election that made us leader
    assert coord.owned_partitions == {1}
    coord.unload_partition(1, 5)
    assert coord.owned_partitions == set()
    await coord.load_partition(1, 7)
    await coord.load_partition(1, 6)  # late news of an older election
    coord.unload_partition(1, 6)
    assert coord.owned_partitions == {1}
    await coord.shutdown()


# ===================================================================== transaction coordinator

class _TxnLog:
    def __init__(self) -> None:
        self.records: dict[int, list[tuple[bytes, bytes | None]]] = {}

    def append(self, partition: int, key: bytes, value: bytes | None) -> None:
        self.records.setdefault(partition, []).append((key, value))

    def read(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        return list(self.records.get(partition, []))

    def coordinator_epoch(self, partition: int) -> int:
        return 0


class _Markers:
    def __init__(self) -> None:
        self.written: list[tuple[int, bool, int]] = []

    def write_markers(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      partitions: Iterable[TopicPartition], *, transaction_version: int = 0) -> None:
        self.written.append((producer_id, commit, coordinator_epoch))


def _txn_coordinator(log: _TxnLog | None = None, markers: _Markers | None = None) -> TransactionCoordinator:
    ids = iter(range(1000, 2000))
    return TransactionCoordinator(TxnConfig(num_partitions=PARTITIONS), log or _TxnLog(), markers or _Markers(),
                                  lambda: next(ids))


def _txn_errors(coordinator: TransactionCoordinator, txn_id: str) -> set[ErrorCode]:
    return {coordinator.init_producer_id(txn_id, 60000).error,
            coordinator.add_partitions(txn_id, 1000, 0, [("t", 0)]),
            coordinator.end_txn(txn_id, 1000, 0, True).error}


@async_test
async def test_transactional_ids_answer_load_in_progress_then_not_coordinator() -> None:
    markers = _Markers()
    coordinator = _txn_coordinator(markers=markers)
    here = _key_on(0, coordinator.partition_for, "tx")
    there = _key_on(1, coordinator.partition_for, "tx")
    assert _txn_errors(coordinator, here) == {ErrorCode.NOT_COORDINATOR}
    loading = task(coordinator.load_partition(0, 9))
    await asyncio.sleep(0)
    assert _txn_errors(coordinator, here) == {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}
    assert _txn_errors(coordinator, there) == {ErrorCode.NOT_COORDINATOR}
    await loading
    init = coordinator.init_producer_id(here, 60000)
    assert init.error is ErrorCode.NONE
    assert coordinator.add_partitions(here, init.producer_id, init.producer_epoch, [("t", 0)]) is ErrorCode.NONE
    assert coordinator.end_txn(here, init.producer_id, init.producer_epoch, True).error is ErrorCode.NONE
    assert markers.written == [(init.producer_id, True, 9)]  # stamped with the epoch it was elected in
    coordinator.shutdown()


@async_test
async def test_unloading_transactions_cancels_their_timeouts_and_abandons_a_load() -> None:
    log = _TxnLog()
    coordinator = _txn_coordinator(log)
    await coordinator.load_partition(0)
    here = _key_on(0, coordinator.partition_for, "tx")
    init = coordinator.init_producer_id(here, 60000)
    assert coordinator.add_partitions(here, init.producer_id, init.producer_epoch, [("t", 0)]) is ErrorCode.NONE
    timer = coordinator._timeouts[here]
    coordinator.unload_partition(0)
    assert timer.cancelled() and here not in coordinator.txns
    # A long log: the resignation arrives while it is replayed.
    log.records[0] = log.records[0] * (2 * LOAD_CHUNK)
    loading = task(coordinator.load_partition(0, 2))
    await asyncio.sleep(0)
    assert coordinator.loading_partitions == {0}
    coordinator.unload_partition(0, 2)
    await loading
    assert not coordinator.owned_partitions and not coordinator.loading_partitions and not coordinator.txns
    await coordinator.load_partition(0, 3)
    assert coordinator.txns[here].state.kafka_name == "Ongoing" and here in coordinator._timeouts
    coordinator.shutdown()
