"""The KRaft controller's partition rules (grete/broker/quorum/partitions.py) on a real metadata
store whose appends commit at once: AlterPartition's refusals and its ISR change, and leadership
moved off a fenced broker."""

from __future__ import annotations

import asyncio
import uuid

from grete.broker.config import BrokerConfig
from grete.broker.quorum.brokers import BrokerRegistry
from grete.broker.quorum.image_changes import publish_entity_changes
from grete.broker.quorum.partitions import PartitionControl
from grete.broker.security.delegation_tokens import DelegationTokenManager
from grete.coordinator.kraft.quorum_store import QuorumMetadataStore
from grete.coordinator.kraft.raft_log import RaftBatch
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import AlterPartitionRequest, BrokerRegistrationRequest
from grete.protocol.metadata import (
    BrokerRegistrationChangeRecord,
    DelegationTokenRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    RegisterBrokerRecord,
)
from grete.protocol.metadata_frame import decode_metadata_record, encode_metadata_record


class Quorum:
    """A store and registry whose every append is committed and applied at once."""

    def __init__(self) -> None:
        self.offset = 0
        self.store = QuorumMetadataStore("cluster", self.append)
        self.registry = BrokerRegistry("cluster", 9000, self.store.commit, lambda: self.offset, lambda: True,
                                       lambda: self.store.next_producer_id)
        self.control = PartitionControl(self.store, self.registry, self.store.commit, lambda: True)
        # the log a new quorum's first leader starts: its bootstrap records, before anything else
        self.bootstrap = (encode_metadata_record(FeatureLevelRecord(name="metadata.version", feature_level=30)),)
        self.store.apply_batch(RaftBatch(0, 1, self.bootstrap))
        self.offset = 1

    async def append(self, values: list[bytes]) -> int:
        batch = RaftBatch(self.offset, 1, tuple(values))
        self.offset += len(values)
        for record, offset in self.store.apply_batch(batch):
            self.registry.apply(record, offset)
            self.control.applied(record)
        return self.offset - 1

    async def broker(self, broker_id: int, fenced: bool = False) -> None:
        epoch = self.offset
        await self.store.commit([RegisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch, fenced=True,
                                                      incarnation_id=uuid.uuid4())])
        if not fenced:
            await self.store.commit([BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch,
                                                                    fenced=-1)])


def alter(topic_id: uuid.UUID, broker: int, epoch: int, isr: list[int], leader_epoch: int = 0,
          partition_epoch: int = 0) -> AlterPartitionRequest:
    return AlterPartitionRequest(broker_id=broker, broker_epoch=epoch, topics=[AlterPartitionRequest.TopicData(
        topic_id=topic_id, partitions=[AlterPartitionRequest.PartitionData(
            partition_index=0, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
            new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b) for b in isr])])])


def test_alter_partition_takes_a_current_leader_s_isr_and_refuses_the_rest() -> None:
    async def run() -> None:
        q = Quorum()
        for broker in (1, 2, 3):
            await q.broker(broker)
        await q.broker(4, fenced=True)
        meta = await q.store.create_topic("t", {0: [1, 2, 3]}, {})
        epoch_of = {b: r.epoch for b, r in q.registry.brokers.items()}

        async def error(request: AlterPartitionRequest) -> int:
            answer = await q.control.alter_partition(request, 3)
            return answer.error_code or answer.topics[0].partitions[0].error_code
        assert await error(alter(meta.topic_id, 2, epoch_of[2], [1, 2])) == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert await error(alter(meta.topic_id, 1, epoch_of[1], [1, 2], leader_epoch=5)) == ErrorCode.FENCED_LEADER_EPOCH
        assert await error(alter(meta.topic_id, 1, epoch_of[1], [1, 2], partition_epoch=3)) == \
            ErrorCode.INVALID_UPDATE_VERSION
        assert await error(alter(meta.topic_id, 1, epoch_of[1], [1, 4])) == ErrorCode.INELIGIBLE_REPLICA
        assert await error(alter(meta.topic_id, 1, epoch_of[1] + 1, [1, 2])) == ErrorCode.STALE_BROKER_EPOCH
        answer = await q.control.alter_partition(alter(meta.topic_id, 1, epoch_of[1], [1, 2]), 3)
        assert answer.topics[0].partitions[0].error_code == 0 and answer.topics[0].partitions[0].partition_epoch == 1
        part = meta.partitions[0]
        assert (part.isr, part.leader, part.leader_epoch, part.partition_epoch) == ([1, 2], 1, 0, 1)
    asyncio.run(run())


def test_a_fenced_broker_s_leaderships_go_to_the_next_live_isr_member() -> None:
    async def run() -> None:
        q = Quorum()
        for broker in (1, 2, 3):
            await q.broker(broker)
        led = await q.store.create_topic("led", {0: [1, 2, 3]}, {})
        followed = await q.store.create_topic("followed", {0: [2, 1]}, {})
        alone = await q.store.create_topic("alone", {0: [1]}, {})
        registration = q.registry.brokers[1]
        registration.fenced = True  # as the fencing record just committed
        await q.control.broker_fenced(1)
        assert (led.partitions[0].leader, led.partitions[0].isr, led.partitions[0].leader_epoch) == (2, [2, 3], 1)
        assert (followed.partitions[0].leader, followed.partitions[0].isr) == (2, [2])
        # The last ISR member stays in it; with no one else the partition has no leader.
        assert (alone.partitions[0].leader, alone.partitions[0].isr) == (-1, [1])
    asyncio.run(run())


class SlowQuorum(Quorum):
    """Appends commit one turn of the event loop later, as a quorum's do: a second change can be
    decided while the first is on its way."""

    async def append(self, values: list[bytes]) -> int:
        await asyncio.sleep(0)
        return await super().append(values)


def test_two_brokers_fenced_at_once_leave_the_isr_and_the_leadership_both() -> None:
    async def run() -> None:
        q = SlowQuorum()
        for broker in (1, 2, 3):
            await q.broker(broker)
        meta = await q.store.create_topic("t", {0: [1, 2, 3]}, {})
        for broker in (1, 2):
            q.registry.brokers[broker].fenced = True  # both sessions expired together
        await asyncio.gather(q.control.broker_fenced(1), q.control.broker_fenced(2))
        # Each change is decided on the other's outcome: not two changes of the same old state.
        assert (meta.partitions[0].leader, meta.partitions[0].isr) == (3, [3])
    asyncio.run(run())


def test_a_broker_unfenced_leads_again_where_it_is_the_last_isr_member() -> None:
    """Every broker fenced at once (a new controller that heard from none of them in time): the
    partitions keep their last ISR member and no leader; when that broker is unfenced, it leads
    them again (as Kafka's controller elects on unfencing). Another broker unfenced changes nothing."""
    async def run() -> None:
        q = Quorum()
        for broker in (1, 2, 3):
            await q.broker(broker)
        meta = await q.store.create_topic("t", {0: [1, 2, 3], 1: [2, 3, 1]}, {})
        for broker in (1, 2, 3):
            q.registry.brokers[broker].fenced = True
            await q.control.broker_fenced(broker)
        assert [(p.leader, p.isr) for _, p in sorted(meta.partitions.items())] == [(-1, [3]), (-1, [3])]
        epoch = meta.partitions[0].leader_epoch
        q.registry.brokers[1].fenced = False
        await q.control.broker_unfenced(1)
        assert meta.partitions[0].leader == -1
        q.registry.brokers[3].fenced = False
        await q.control.broker_unfenced(3)
        assert [(p.leader, p.isr) for _, p in sorted(meta.partitions.items())] == [(3, [3]), (3, [3])]
        assert meta.partitions[0].leader_epoch == epoch + 1
    asyncio.run(run())


def test_with_eligible_leader_replicas_the_isr_empties_and_the_elr_leads() -> None:
    """eligible.leader.replicas.version 1 and min.insync.replicas 2: an ISR shrunk below its minimum
    puts the replicas leaving it in the ELR; the leader fenced empties the ISR and the first unfenced
    ELR member leads; a broker registering again after an unclean stop leaves the ELR; a change of
    min.insync.replicas clears the ELRs (ClearElrRecord)."""
    async def run() -> None:
        q = Quorum()
        q.registry.partitions = q.control
        await q.store.commit([FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1)])
        for broker in (1, 2, 3):
            await q.broker(broker)
        meta = await q.store.create_topic("t", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        epoch_of = {b: r.epoch for b, r in q.registry.brokers.items()}
        answer = await q.control.alter_partition(alter(meta.topic_id, 1, epoch_of[1], [1]), 3)
        assert answer.topics[0].partitions[0].error_code == 0
        part = meta.partitions[0]
        assert (part.leader, part.isr, part.elr) == (1, [1], [2, 3])
        q.registry.brokers[1].fenced = True
        await q.control.broker_fenced(1)
        assert (part.leader, part.isr, part.elr, part.last_known_elr) == (2, [2], [1, 3], [])
        # Broker 3's process died and came back: the epoch it names is not the one it had.
        await q.registry.register(BrokerRegistrationRequest(
            broker_id=3, cluster_id="cluster", incarnation_id=uuid.uuid4(), listeners=[], features=[], rack=None,
            log_dirs=[], previous_broker_epoch=-1))
        assert (part.leader, part.isr, part.elr) == (2, [2], [1])
        # Broker 1 stopped cleanly: it names its epoch and stays eligible.
        await q.registry.register(BrokerRegistrationRequest(
            broker_id=1, cluster_id="cluster", incarnation_id=uuid.uuid4(), listeners=[], features=[], rack=None,
            log_dirs=[], previous_broker_epoch=epoch_of[1]))
        assert part.elr == [1]
        before = part.partition_epoch
        await q.store.set_topic_configs("t", {"min.insync.replicas": "1"})
        assert (part.elr, part.last_known_elr, part.partition_epoch) == ([], [], before + 1)
    asyncio.run(run())


def test_a_reassignment_completed_with_the_isr_at_its_minimum_clears_the_elr() -> None:
    async def run() -> None:
        q = Quorum()
        await q.store.commit([FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1)])
        for broker in (1, 2, 3, 4):
            await q.broker(broker)
        meta = await q.store.create_topic("t", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        epoch_of = {b: r.epoch for b, r in q.registry.brokers.items()}
        await q.control.alter_partition(alter(meta.topic_id, 1, epoch_of[1], [1]), 3)
        part = meta.partitions[0]
        assert part.elr == [2, 3]
        await q.control.reassign({("t", 0): [1, 4]})
        answer = await q.control.alter_partition(alter(meta.topic_id, 1, epoch_of[1], [1, 4],
                                                       partition_epoch=part.partition_epoch), 3)
        assert answer.topics[0].partitions[0].error_code == 0, answer
        assert (part.replicas, part.isr, part.elr) == ([1, 4], [1, 4], [])
    asyncio.run(run())


def test_an_isr_shrinking_during_a_reassignment_fills_the_elr() -> None:
    """A step that does not complete the reassignment follows the ELR rules as any other change:
    below min.insync.replicas the replicas leaving the ISR become eligible, and one of them leads
    once the last ISR member is fenced."""
    async def run() -> None:
        q = Quorum()
        q.registry.partitions = q.control
        await q.store.commit([FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1)])
        for broker in (1, 2, 3, 4):
            await q.broker(broker)
        meta = await q.store.create_topic("t", {0: [1, 2, 3]}, {"min.insync.replicas": "2"})
        epoch_of = {b: r.epoch for b, r in q.registry.brokers.items()}
        await q.control.reassign({("t", 0): [1, 2, 4]})
        part = meta.partitions[0]
        assert (part.replicas, part.isr, part.leader_epoch) == ([1, 2, 4, 3], [1, 2, 3], 0)
        answer = await q.control.alter_partition(alter(meta.topic_id, 1, epoch_of[1], [1],
                                                       partition_epoch=part.partition_epoch), 3)
        assert answer.topics[0].partitions[0].error_code == 0, answer
        assert (part.replicas, part.isr, part.elr, part.leader) == ([1, 2, 4, 3], [1], [2, 3], 1)
        q.registry.brokers[1].fenced = True
        await q.control.broker_fenced(1)
        assert (part.leader, part.isr, part.elr) == (2, [2], [1, 3])
    asyncio.run(run())


def test_a_new_incarnation_registers_over_a_fenced_broker_at_once() -> None:
    """Another process with a live broker's id is refused while that broker is unfenced and within
    its session; once it is fenced (its process seen dead) the new one registers at once, as Kafka's
    controller does (a fenced broker has no session)."""
    async def run() -> None:
        q = Quorum()

        def registration() -> BrokerRegistrationRequest:
            return BrokerRegistrationRequest(broker_id=7, cluster_id="cluster", incarnation_id=uuid.uuid4(),
                                             listeners=[], features=[], rack=None, log_dirs=[])
        first = await q.registry.register(registration())
        assert first.error_code == ErrorCode.NONE
        await q.store.commit([BrokerRegistrationChangeRecord(broker_id=7, broker_epoch=first.broker_epoch,
                                                             fenced=-1)])
        assert (await q.registry.register(registration())).error_code == ErrorCode.DUPLICATE_BROKER_REGISTRATION
        await q.store.commit([BrokerRegistrationChangeRecord(broker_id=7, broker_epoch=first.broker_epoch,
                                                             fenced=1)])
        again = await q.registry.register(registration())
        assert again.error_code == ErrorCode.NONE and again.broker_epoch > first.broker_epoch
    asyncio.run(run())


def test_a_voter_s_token_index_follows_records_another_voter_wrote() -> None:
    """A follower voter applies a token record it did not write; publishing the batch's entity changes
    is what brings its delegation-token index (by HMAC) up to date for when it leads."""
    config = BrokerConfig({"delegation.token.secret.key": "s3cret"})
    follower = QuorumMetadataStore("cluster", _discard)
    tokens = DelegationTokenManager(config, follower)
    record = DelegationTokenRecord(owner="User:alice", requester="User:alice", renewers=[], issue_timestamp=1,
                                   max_timestamp=2**40, expiration_timestamp=2**40, token_id="t1")
    batch = RaftBatch(0, 1, (encode_metadata_record(record),))
    applied = follower.apply_batch(batch)
    assert tokens.token_for_hmac(tokens.hmac_of("t1")) is None  # applied, not yet published
    publish_entity_changes(follower.changes, (r for r, _ in applied))
    found = tokens.token_for_hmac(tokens.hmac_of("t1"))
    assert found is not None and found.owner == "User:alice"


async def _discard(values: list[bytes]) -> int:
    raise AssertionError("nothing is written here")


def test_a_topic_is_removed_between_partition_changes_never_under_one() -> None:
    """A reassignment asked for while the topic's removal is on its way to the log is decided after
    it: on a topic that is gone (UNKNOWN_TOPIC_OR_PARTITION), so no partition change follows the
    RemoveTopicRecord (every node would fail to apply it)."""
    async def run() -> None:
        q = Quorum()
        changing = asyncio.Lock()
        slow_commits: list[str] = []

        async def append(values: list[bytes]) -> int:
            await asyncio.sleep(0.02)  # committing takes a while
            offset = await q.append(values)
            slow_commits.extend(type(decode_metadata_record(v)[0]).__name__ for v in values)
            return offset
        q.store = QuorumMetadataStore("cluster", append, changing)
        q.store.apply_batch(RaftBatch(0, 1, q.bootstrap))
        q.registry = BrokerRegistry("cluster", 9000, q.store.commit, lambda: q.offset, lambda: True,
                                    lambda: q.store.next_producer_id)
        q.control = PartitionControl(q.store, q.registry, q.store.commit, lambda: True, changing=changing)
        for broker in (1, 2):
            await q.broker(broker)
        await q.store.create_topic("t", {0: [1]}, {})
        deletion = asyncio.ensure_future(q.store.delete_topic("t"))
        await asyncio.sleep(0)  # the removal is on its way
        outcome = await q.control.reassign({("t", 0): [2]})
        await deletion
        assert outcome[("t", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert slow_commits[-1] == "RemoveTopicRecord" and "PartitionChangeRecord" not in slow_commits
    asyncio.run(run())


def test_a_partition_change_of_a_topic_that_is_gone_is_skipped_by_the_store() -> None:
    async def run() -> None:
        q = Quorum()
        await q.broker(1)
        meta = await q.store.create_topic("t", {0: [1]}, {})
        await q.store.delete_topic("t")
        await q.store.commit([PartitionChangeRecord(topic_id=meta.topic_id, partition_id=0, leader=1)])
        assert q.store.topic("t") is None
        await q.store.create_topic("u", {0: [1]}, {})  # the log goes on
        assert q.store.topic("u") is not None
    asyncio.run(run())
