"""Share groups in a grete cluster: a share partition's state lives with its share coordinator (the
leader of its ``__share_group_state`` partition), so the partition's leader can die without losing it.
Records acknowledged before the SIGKILL are never delivered again; records that were acquired but not
acknowledged are delivered again by the new leader, with their delivery count kept. The coordinator
can die too: the leader's write waits for the state partition's next leader, which loads the state
from its log. The group coordinator can die as well: the group comes back from ``__consumer_offsets``
at the next one. About 50 s for the four tests (marked slow; run by hand:
``python -m pytest tests/cluster/test_cluster_share.py -m slow``)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from grete.storage.files import uuid_from_kafka, uuid_to_kafka
from grete.testing._wire import Wire
from grete.testing.cluster import GreteCluster, cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    need_zookeeper()
    overrides = {**CLUSTER_OVERRIDES, "share.coordinator.state.topic.num.partitions": "3",
                 "auto.leader.rebalance.enable": "false", "group.share.record.lock.duration.ms": "60000",
                 "group.share.min.record.lock.duration.ms": "15000"}
    with cluster(3, overrides=overrides) as running:
        yield running


def wire_to(grete_cluster: GreteCluster, broker_id: int) -> Wire:
    host, port = grete_cluster.brokers[broker_id].bootstrap_servers.rsplit(":", 1)
    return Wire(host, int(port), timeout=30.0)


def leader_of(zk: KazooClient, topic: str, partition: int) -> int:
    state = json.loads(zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")[0])
    return int(state["leader"])


COORDINATOR_RETRIABLE = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REBALANCE_IN_PROGRESS)


def join(grete_cluster: GreteCluster, live: list[int], group: str, topic: str) -> tuple[str, Any]:
    """A new member with partition 0 assigned, through the group's coordinator: (member id, topic id)."""
    member = uuid.uuid4().hex[:22]
    epoch = 0

    def beat() -> Any:
        nonlocal epoch
        with closing(wire_to(grete_cluster, live[0])) as w:
            found = w.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4)
        c = found.coordinators[0]
        if c.error_code != 0 or c.node_id not in live:
            return None
        with closing(wire_to(grete_cluster, c.node_id)) as w:
            hb = w.call(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                   subscribed_topic_names=[topic] if epoch == 0 else None),
                        ShareGroupHeartbeatResponse, 1)
        if hb.error_code != 0:
            return None
        epoch = hb.member_epoch
        return hb.assignment.topic_partitions[0].topic_id if hb.assignment and hb.assignment.topic_partitions else None

    topic_id = wait_until(beat, 30, "an assignment")
    return member, topic_id


def acquire(w: Wire, group: str, member: str, topic_id: Any, epoch: int) -> tuple[int, list[tuple[int, int, int]]]:
    r = w.call(ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=500,
                                 min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=1, topics=[
                                     ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                                         ShareFetchRequest.FetchPartition(partition_index=0)])]), ShareFetchResponse, 1)
    (p,) = r.responses[0].partitions if r.responses else [None]
    code = r.error_code or (p.error_code if p is not None else 0)
    return code, [(a.first_offset, a.last_offset, a.delivery_count) for a in (p.acquired_records if p else [])]


def share_coordinator(grete_cluster: GreteCluster, via: int, group: str, topic_id: Any) -> int | None:
    """FindCoordinator v6, key type SHARE: the leader of the key's ``__share_group_state`` partition
    (the topic is created by the first lookup)."""
    with closing(wire_to(grete_cluster, via)) as w:
        found = w.call(FindCoordinatorRequest(key_type=2, coordinator_keys=[f"{group}:{uuid_to_kafka(topic_id)}:0"]),
                       FindCoordinatorResponse, 6)
    c = found.coordinators[0]
    return c.node_id if c.error_code == 0 else None


def acknowledge(w: Wire, group: str, member: str, topic_id: Any, epoch: int,
                batches: list[tuple[int, int, int]]) -> int:
    B = ShareAcknowledgeRequest
    acked = w.call(B(group_id=group, member_id=member, share_session_epoch=epoch, topics=[B.AcknowledgeTopic(
        topic_id=topic_id, partitions=[B.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
            B.AcknowledgementBatch(first_offset=first, last_offset=last, acknowledge_types=[kind])
            for first, last, kind in batches])])]), ShareAcknowledgeResponse, 1)
    return int(acked.error_code or (acked.responses[0].partitions[0].error_code if acked.responses else 0))


class Scenario:
    """A 1-partition topic with 3 replicas, a share group whose share coordinator and group coordinator
    are not the partition's leader, and one member that has acquired ``records`` single-record batches."""

    def __init__(self, grete_cluster: GreteCluster, zk: KazooClient, records: int) -> None:
        self.cluster, self.zk = grete_cluster, zk
        self.topic = f"t-{uuid.uuid4().hex[:10]}"
        admin = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
        admin.create_topics([NewTopic(self.topic, 1, 3)])[self.topic].result(30)
        self.live = sorted(grete_cluster.brokers)
        self.leader = leader_of(zk, self.topic, 0)
        self.topic_id = uuid_from_kafka(json.loads(zk.get(f"/brokers/topics/{self.topic}")[0])["topic_id"])
        for _ in range(60):  # the leader writes over the inter-broker channel
            self.group = f"sg-{uuid.uuid4().hex[:8]}"
            self.coordinator = wait_until(lambda g=self.group: share_coordinator(
                grete_cluster, self.leader, g, self.topic_id), 30, "the share coordinator")
            if self.coordinator != self.leader and wait_until(self._group_coordinator, 30, "a group coordinator") \
                    != self.leader:  # nor is its group coordinator: Alter reaches the leader through the former
                break
        else:
            pytest.fail(f"every group's coordinators are on broker {self.leader}: leadership is not balanced")
        self.member, assigned = join(grete_cluster, self.live, self.group, self.topic)
        assert assigned == self.topic_id
        self.wire = wire_to(grete_cluster, self.leader)
        # The first fetch initializes the share partition at the end of the log (latest): 0.
        wait_until(lambda: acquire(self.wire, self.group, self.member, self.topic_id, 0) == (0, []), 30,
                   "the share partition")
        producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all", "linger.ms": 0})
        for i in range(records):
            producer.produce(self.topic, f"r{i}".encode(), partition=0)
            producer.flush(30)  # one batch per record: acknowledgements can split anywhere
        code, got = acquire(self.wire, self.group, self.member, self.topic_id, 1)
        assert code == 0 and [(a, b) for a, b, _ in got] == [(i, i) for i in range(records)]
        self.epoch = 2

    def acknowledge(self, batches: list[tuple[int, int, int]]) -> int:
        code = acknowledge(self.wire, self.group, self.member, self.topic_id, self.epoch, batches)
        self.epoch += 1
        return code

    def _group_coordinator(self) -> int | None:
        with closing(wire_to(self.cluster, self.live[0])) as w:
            found = w.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group]),
                           FindCoordinatorResponse, 4).coordinators[0]
        return int(found.node_id) if found.error_code == 0 else None

    def group_coordinator(self) -> int:
        found = self._group_coordinator()
        assert found is not None
        return found

    def leave(self) -> None:
        """The member closes its share session at the leader (final epoch) and leaves the group."""
        assert acknowledge(self.wire, self.group, self.member, self.topic_id, -1, []) == 0

        def left() -> bool:
            # As a client would: the coordinator may be moving or loading (the fixture rebalances
            # leaderships after a test that killed a broker), and its membership write waits on the ISR.
            with closing(wire_to(self.cluster, self.group_coordinator())) as w:
                code = w.call(ShareGroupHeartbeatRequest(group_id=self.group, member_id=self.member, member_epoch=-1),
                              ShareGroupHeartbeatResponse, 1).error_code
            assert code in (0, *COORDINATOR_RETRIABLE), ErrorCode(code).name
            return code == 0

        wait_until(left, 30, "the member's leave heartbeat answered")

    def describe(self) -> tuple[int, int]:
        """DescribeShareGroupOffsets v1 at the group's coordinator: (start offset, lag), which it reads
        from the share coordinator (ReadShareGroupStateSummary)."""
        D = DescribeShareGroupOffsetsRequest
        with closing(wire_to(self.cluster, self.group_coordinator())) as w:
            r = w.call(D(groups=[D.DescribeShareGroupOffsetsRequestGroup(group_id=self.group, topics=[
                D.DescribeShareGroupOffsetsRequestTopic(topic_name=self.topic, partitions=[0])])]),
                DescribeShareGroupOffsetsResponse, 1)
        (p,) = r.groups[0].topics[0].partitions
        return p.start_offset, p.lag

    def kill(self, broker: int) -> None:
        self.cluster.kill_broker(broker)
        self.live = [b for b in self.live if b != broker]

    def redelivered_by_a_new_leader(self) -> list[tuple[int, int, int]]:
        """Kill the partition's leader; what the next one delivers to a new member."""
        self.wire.close()
        old = self.leader
        self.kill(old)
        self.leader = wait_until(lambda: (lambda n: n if n in self.live else None)(leader_of(self.zk, self.topic, 0)),
                                 30, "a new leader")
        member, _ = join(self.cluster, self.live, self.group, self.topic)
        found: list[tuple[int, int, int]] = []
        with closing(wire_to(self.cluster, self.leader)) as w:
            def redelivered() -> bool:
                code, got = acquire(w, self.group, member, self.topic_id, 0)
                assert code in (0, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ErrorCode(code).name
                found.extend(got)
                return bool(got)

            wait_until(redelivered, 30, "records from the new leader")
        return found


@pytest.fixture
def zk(grete_cluster: GreteCluster) -> Iterator[KazooClient]:
    client = KazooClient(hosts=grete_cluster.zookeeper.connect)
    client.start(10)
    yield client
    client.stop()
    client.close()
    restarted = False
    for broker in sorted(grete_cluster.brokers):  # the next test finds three brokers again
        if grete_cluster.brokers[broker].process.poll() is not None:
            grete_cluster.start_broker(broker)
            restarted = True
    if restarted:  # and leadership spread again (the internal topics' preferred leaders differ)
        admin = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})

        def balanced() -> bool:
            results = admin.elect_leaders(ElectionType.PREFERRED, None).result(30)
            return all(e is None or e.code() == KafkaError.ELECTION_NOT_NEEDED for e in results.values())

        wait_until(balanced, 60, "preferred leaders back")


def offsets(found: list[tuple[int, int, int]]) -> list[int]:
    return sorted(o for first, last, _ in found for o in range(first, last + 1))


def test_acknowledged_state_survives_the_share_partition_leaders_death(grete_cluster: GreteCluster,
                                                                       zk: KazooClient) -> None:
    s = Scenario(grete_cluster, zk, 10)
    assert s.acknowledge([(0, 3, 1), (4, 4, 3)]) == 0
    assert s.describe() == (5, 5)  # 10 records, 0-4 complete
    # 0-3 accepted, 4 rejected, 5-9 still acquired (60 s locks) when the leader dies.
    started = time.monotonic()
    found = s.redelivered_by_a_new_leader()
    assert offsets(found) == [5, 6, 7, 8, 9]  # nothing acknowledged (0-3) or rejected (4) comes back
    assert {count for _, _, count in found} == {2}  # the first delivery was counted
    assert time.monotonic() - started < 40


def test_state_survives_the_share_coordinators_death(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """The coordinator dies first: the leader's next write waits for the state partition's new leader
    (which loads the state from its log); then the share partition's leader dies too."""
    s = Scenario(grete_cluster, zk, 6)
    assert s.acknowledge([(0, 1, 1)]) == 0
    s.kill(s.coordinator)
    started = time.monotonic()
    assert s.acknowledge([(2, 3, 1)]) == 0  # answered once the new coordinator has it
    assert time.monotonic() - started < 25
    found = s.redelivered_by_a_new_leader()
    assert offsets(found) == [4, 5] and {count for _, _, count in found} == {2}


def test_alter_offsets_of_an_empty_group_reach_the_leader(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """AlterShareGroupOffsets at the group coordinator goes to the share coordinator (a new state
    epoch); the partition's leader, whose cached share partition went with the group's last share
    session, reads it again: the next member gets the records from the new start offset."""
    s = Scenario(grete_cluster, zk, 6)
    assert s.acknowledge([(0, 5, 1)]) == 0
    # The lag comes from the high watermark the coordinator's broker knows, which a follower learns
    # a fetch later (-1 until then, as Kafka answers an unknown lag).
    wait_until(lambda: s.describe() == (6, 0), 15, "the start offset and lag after the acknowledgement")
    s.leave()
    A = AlterShareGroupOffsetsRequest

    def altered() -> bool:
        with closing(wire_to(grete_cluster, s.group_coordinator())) as w:
            r = w.call(A(group_id=s.group, topics=[A.AlterShareGroupOffsetsRequestTopic(
                topic_name=s.topic, partitions=[A.AlterShareGroupOffsetsRequestPartition(partition_index=0,
                                                                                          start_offset=2)])]),
                AlterShareGroupOffsetsResponse, 0)
        assert r.error_code in (0, *COORDINATOR_RETRIABLE), ErrorCode(r.error_code).name
        assert r.error_code != 0 or r.responses[0].partitions[0].error_code == 0
        return r.error_code == 0

    wait_until(altered, 30, "AlterShareGroupOffsets answered")
    assert s.describe() == (2, 4)
    member, _ = join(grete_cluster, s.live, s.group, s.topic)
    found: list[tuple[int, int, int]] = []

    def delivered() -> bool:
        code, got = acquire(s.wire, s.group, member, s.topic_id, 0)
        assert code == 0, ErrorCode(code).name
        found.extend(got)
        return bool(got)

    wait_until(delivered, 20, "records from the altered start offset")
    assert offsets(found) == [2, 3, 4, 5]


def test_a_share_group_moves_with_its_group_coordinator(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """The group coordinator dies: the next leader of the group's ``__consumer_offsets`` partition
    loads the group from its records, with its epochs and its member, which heartbeats on with its
    epoch and keeps its assignment (before, the member had to join again)."""
    s = Scenario(grete_cluster, zk, 2)
    old = s.group_coordinator()
    before = describe_share_group(grete_cluster, old, s.group)
    assert [m.member_id for m in before.members] == [s.member]
    s.kill(old)

    def moved() -> Any:
        found = s._group_coordinator()
        if found is None or found == old or found not in s.live:
            return None
        g = describe_share_group(grete_cluster, found, s.group)
        assert g.error_code in (0, *COORDINATOR_RETRIABLE), ErrorCode(g.error_code).name
        return (found, g) if g.error_code == 0 else None

    new, after = wait_until(moved, 60, "the group at its new coordinator")
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert [(m.member_id, m.member_epoch) for m in after.members] == [(s.member, before.members[0].member_epoch)]
    with closing(wire_to(grete_cluster, new)) as w:
        hb = w.call(ShareGroupHeartbeatRequest(group_id=s.group, member_id=s.member,
                                               member_epoch=before.members[0].member_epoch),
                    ShareGroupHeartbeatResponse, 1)
    assert hb.error_code == 0 and hb.member_epoch == before.members[0].member_epoch


def describe_share_group(grete_cluster: GreteCluster, broker: int, group: str) -> Any:
    with closing(wire_to(grete_cluster, broker)) as w:
        return w.call(ShareGroupDescribeRequest(group_ids=[group]), ShareGroupDescribeResponse, 1).groups[0]
