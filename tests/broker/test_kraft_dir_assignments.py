"""Which log dir holds each replica on a KRaft cluster (KIP-858): the controller's side of
AssignReplicasToDirs and of the failed dirs a heartbeat reports, on a real metadata store whose
appends commit at once, and the broker's sender of assignments."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from grete.broker.quorum import dir_assignments
from grete.broker.quorum.dir_assignments import DirAssignments
from grete.protocol.codec import ZERO_UUID, Message
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatRequest,
)
from grete.protocol.metadata import PartitionChangeRecord, PartitionRecord, RegisterBrokerRecord
from tests.broker.test_quorum_partitions import Quorum

A, B = uuid.UUID(int=0xA1), uuid.UUID(int=0xB2)
Request = AssignReplicasToDirsRequest


def assign(broker: int, epoch: int, placed: dict[uuid.UUID, list[tuple[uuid.UUID, int]]]) -> Request:
    return Request(broker_id=broker, broker_epoch=epoch, directories=[
        Request.DirectoryData(id=d, topics=[Request.TopicData(topic_id=t, partitions=[Request.PartitionData(
            partition_index=i)]) for t, i in where]) for d, where in placed.items()])


def errors(answer: AssignReplicasToDirsResponse) -> list[int]:
    return [p.error_code for d in answer.directories for t in d.topics for p in t.partitions]


async def two_dir_broker(q: Quorum) -> int:
    """Brokers 1-3, broker 1 with the dirs A and B; its epoch."""
    q.registry.partitions = q.control
    epoch = q.offset
    await q.store.commit([RegisterBrokerRecord(broker_id=1, broker_epoch=epoch, fenced=True, log_dirs=[A, B],
                                               incarnation_id=uuid.uuid4())])
    await q.registry.heartbeat(BrokerHeartbeatRequest(broker_id=1, broker_epoch=epoch, current_metadata_offset=epoch))
    for broker in (2, 3):
        await q.broker(broker)
    return epoch


def test_placements_are_recorded_and_a_failed_dir_moves_only_its_replicas() -> None:
    async def run() -> None:
        q = Quorum()
        epoch = await two_dir_broker(q)
        assert not q.registry.brokers[1].fenced
        meta = await q.store.create_topic("t", {0: [1, 2, 3], 1: [1, 2, 3]}, {})
        elsewhere = await q.store.create_topic("other", {0: [2, 3]}, {})
        # Two dirs: the controller cannot place the replica, the broker says where it went.
        assert meta.partitions[0].directory(1) == ZERO_UUID
        answer = await q.registry.assign_dirs(assign(1, epoch, {A: [(meta.topic_id, 0)], B: [(meta.topic_id, 1)]}))
        assert answer.error_code == 0 and errors(answer) == [0, 0]
        assert (meta.partitions[0].directory(1), meta.partitions[1].directory(1)) == (A, B)
        assert meta.partitions[1].partition_epoch == 1 and meta.partitions[1].leader == 1
        refused = await q.registry.assign_dirs(assign(1, epoch, {A: [(uuid.uuid4(), 0), (meta.topic_id, 7),
                                                                     (elsewhere.topic_id, 0)]}))
        assert errors(refused) == [ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   ErrorCode.NOT_LEADER_OR_FOLLOWER]
        stale = await q.registry.assign_dirs(assign(1, epoch + 1, {A: [(meta.topic_id, 0)]}))
        assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
        # Dir B fails: partition 1 moves, partition 0 (dir A) stays with broker 1.
        heartbeat = BrokerHeartbeatRequest(broker_id=1, broker_epoch=epoch, current_metadata_offset=q.offset,
                                           offline_log_dirs=[B])
        assert (await q.registry.heartbeat(heartbeat)).error_code == 0
        assert (meta.partitions[1].leader, meta.partitions[1].isr) == (2, [2, 3])
        assert (meta.partitions[0].leader, meta.partitions[0].isr) == (1, [1, 2, 3])
        assert q.registry.brokers[1].log_dirs == [A]
        assert q.registry.replica_offline(1, B) and not q.registry.replica_offline(1, A)
        assert not q.registry.replica_offline(1, ZERO_UUID)  # unassigned counts as online, as Kafka's
        written = q.offset
        await q.registry.heartbeat(heartbeat)  # reported again: nothing more to write
        assert q.offset == written
        # A replica placed in the failed dir after the fact leaves its leadership in the same batch.
        late = await q.store.create_topic("late", {0: [1, 3]}, {})
        await q.registry.assign_dirs(assign(1, epoch, {B: [(late.topic_id, 0)]}))
        assert (late.partitions[0].leader, late.partitions[0].isr, late.partitions[0].directory(1)) == (3, [3], B)
    asyncio.run(run())


def test_a_snapshot_keeps_the_directories_and_a_replica_change_keeps_those_that_stay() -> None:
    async def run() -> None:
        q = Quorum()
        epoch = await two_dir_broker(q)
        meta = await q.store.create_topic("t", {0: [1, 2]}, {})
        await q.registry.assign_dirs(assign(1, epoch, {B: [(meta.topic_id, 0)]}))
        records = q.store.state_records(q.store.partition_record)
        snapshot = next(r for r in records if isinstance(r, PartitionRecord))
        assert snapshot.directories == [B, ZERO_UUID]
        # A record changing the replicas without directories (an older writer): broker 1's dir stays.
        await q.store.commit([PartitionChangeRecord(topic_id=meta.topic_id, partition_id=0, leader=-2,
                                                    replicas=[3, 1], directories=None)])
        assert meta.partitions[0].directories == [ZERO_UUID, B]
    asyncio.run(run())


def test_the_broker_sends_its_placements_once_registered_and_again_when_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dir_assignments, "RETRY_BACKOFF_S", 0)
    topic = uuid.uuid4()

    async def run() -> None:
        sent: list[AssignReplicasToDirsRequest] = []
        answers = [ErrorCode.NOT_CONTROLLER, ErrorCode.NONE]
        epoch = [-1]

        async def call(request: Message, _version: int) -> Message:
            assert isinstance(request, AssignReplicasToDirsRequest)
            sent.append(request)
            return AssignReplicasToDirsResponse(error_code=answers.pop(0))
        # The image already says partition 2 is in A: that one is not sent.
        sender = DirAssignments(7, lambda: epoch[0], call, lambda _t, index, _d: index != 2)
        sender.submit(topic, 0, A)
        sender.submit(topic, 1, B)
        sender.submit(topic, 2, A)
        await asyncio.sleep(0.01)
        assert not sent  # not registered yet
        epoch[0] = 42
        sender.kick()
        for _ in range(50):
            if len(sent) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(sent) == 2 and sent[0] == sent[1]
        placed = {(d.id, p.partition_index) for d in sent[1].directories for t in d.topics for p in t.partitions}
        assert placed == {(A, 0), (B, 1)} and sent[1].broker_epoch == 42 and sent[1].broker_id == 7
        sender.close()
    asyncio.run(run())
