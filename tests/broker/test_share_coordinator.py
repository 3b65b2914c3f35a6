"""The share coordinator (grete.broker.groups.share_coordinator) over a stand-in for its state partition:
writes become ShareUpdate records with a ShareSnapshot every N, a new leader epoch of the state
partition reloads them from the log, share-partition leader epochs fence old leaders, summaries
count the records whose delivery is complete."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from grete.broker.config import BrokerConfig
from grete.broker.groups.share_coordinator import ShareCoordinator
from grete.coordinator.share.share_format import SNAPSHOT, UPDATE, ShareKey, StateBatch, decode_key
from grete.coordinator.share.share_partition import ACKNOWLEDGED, ARCHIVED, AVAILABLE
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import decode_records


@dataclass
class Appended:
    last_offset: int


@dataclass
class StatePartition:
    """What the coordinator uses of a Partition: appends, batches, leadership."""
    leader_epoch: int = 0
    is_leader: bool = True
    has_followers: bool = False
    log: list[RecordBatch] = field(default_factory=list)
    pruned_before: int = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.log)

    high_watermark = log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.pruned_before

    def check_enough_replicas(self) -> None:
        pass

    def append(self, batch: RecordBatch, now_ms: int) -> Appended:
        batch.base_offset = len(self.log)  # the offset the log gives it
        self.log.append(batch)
        return Appended(len(self.log) - 1)

    def batches(self, start: int, end: int | None = None) -> list[RecordBatch]:
        return self.log[start:end]

    def delete_records_before(self, offset: int) -> int:
        self.pruned_before = offset
        return offset

    def kinds(self) -> list[int]:
        return [decode_key(r.key)[0] for b in self.log for r in decode_records(b)]  # type: ignore[arg-type,index]


class Replicas:
    def __init__(self, partition: StatePartition) -> None:
        self.state = partition

    def partition(self, topic: str, index: int) -> Any:
        return self.state


KEY = ShareKey("g", uuid.UUID(int=5), 0)


def coordinator(per_snapshot: int = 2) -> tuple[ShareCoordinator, StatePartition]:
    config = BrokerConfig({"share.coordinator.snapshot.update.records.per.snapshot": str(per_snapshot)}, strict=True)
    partition = StatePartition()
    return ShareCoordinator(config, Replicas(partition)), partition  # type: ignore[arg-type]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_writes_are_updates_with_a_snapshot_every_n_and_reload_from_the_log() -> None:
    c, partition = coordinator(per_snapshot=2)
    assert c.read(KEY, 0) is None
    run(c.write(KEY, 0, 0, 10, []))  # the first state is a snapshot
    run(c.write(KEY, 0, 0, 10, [StateBatch(10, 14, AVAILABLE, 1)]))
    run(c.write(KEY, 0, 0, 12, [StateBatch(12, 12, ACKNOWLEDGED, 1), StateBatch(13, 13, ARCHIVED, 5)]))
    run(c.write(KEY, 0, 0, -1, [StateBatch(14, 16, AVAILABLE, 2)]))  # -1: the start offset stays
    assert partition.kinds() == [SNAPSHOT, UPDATE, UPDATE, SNAPSHOT]
    expected = (12, [(12, 12, ACKNOWLEDGED, 1), (13, 13, ARCHIVED, 5), (14, 16, AVAILABLE, 2)])
    state = c.read(KEY, 0)
    assert state is not None
    assert (state.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                 for b in state.batches]) == expected
    summary = c.summary(KEY)
    assert summary is not None and (summary.start_offset, summary.delivery_complete_count) == (12, 2)
    partition.leader_epoch = 1  # the state partition moved here again: its states come from the log
    reloaded = c.read(KEY, 0)
    assert reloaded is not None and (reloaded.start_offset, [(b.first_offset, b.last_offset, b.delivery_state,
                                                              b.delivery_count) for b in reloaded.batches]) == expected


def test_old_share_partition_leaders_are_fenced_and_deletes_forget() -> None:
    c, partition = coordinator()
    run(c.write(KEY, 0, 3, 0, []))
    assert c.read(KEY, 4) is not None  # a new leader (epoch 4) read it
    with pytest.raises(KafkaError) as fenced:
        run(c.write(KEY, 0, 3, 5, []))
    assert fenced.value.code == ErrorCode.FENCED_LEADER_EPOCH
    partition.leader_epoch = 1  # the state partition moved: the epoch written with the state still fences
    with pytest.raises(KafkaError) as still:
        run(c.write(KEY, 0, 2, 5, []))
    assert still.value.code == ErrorCode.FENCED_LEADER_EPOCH
    run(c.delete(KEY))
    assert c.read(KEY, 4) is None
    partition.leader_epoch = 2
    assert c.read(KEY, 4) is None  # the tombstone is in the log too


def test_not_the_coordinator_when_it_does_not_lead_the_state_partition() -> None:
    c, partition = coordinator()
    partition.is_leader = False
    with pytest.raises(KafkaError) as refused:
        c.read(KEY, 0)
    assert refused.value.code == ErrorCode.NOT_COORDINATOR


def test_records_before_the_oldest_needed_snapshot_are_deleted() -> None:
    c, partition = coordinator(per_snapshot=1)
    other = ShareKey("h", uuid.UUID(int=6), 1)
    run(c.write(KEY, 0, 0, 0, []))                                    # 0: snapshot of KEY
    run(c.write(other, 0, 0, 0, []))                                  # 1: snapshot of other
    run(c.write(KEY, 0, 0, 0, [StateBatch(0, 1, AVAILABLE, 1)]))      # 2: update of KEY
    run(c.write(KEY, 0, 0, 2, [StateBatch(2, 2, ACKNOWLEDGED, 1)]))   # 3: snapshot of KEY
    assert partition.pruned_before == 1  # other's snapshot (1) is the oldest one still needed
    run(c.delete(other))                                              # 4: tombstone
    assert partition.pruned_before == 3
    partition.leader_epoch = 1
    state = c.read(KEY, 0)
    assert state is not None and state.start_offset == 2 and c.read(other, 0) is None
