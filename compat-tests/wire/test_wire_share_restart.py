"""A share group outlives its coordinator's restart, as Kafka 4.3.1 keeps it in ``__consumer_offsets``
(its epoch, members' subscriptions, target and current assignments): after a SIGKILL and a restart
the group is listed and described with the epoch it had, a member that was in it heartbeats on with
its epoch, one that left stays gone, a new member's epoch continues from the group's, and the share
partition's start offset is still there. Against grete and Kafka 4.3.1, each on its own broker."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from wire_share_helpers import call, describe_offsets, heartbeat, join

from grete.coordinator.groups.offsets_format import partition_for
from grete.coordinator.share import share_records
from grete.coordinator.share.share_group import ShareGroup
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    DescribeShareGroupOffsetsRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from grete.testing._wire import Wire
from grete.testing.cluster import GreteCluster, cluster
from grete.testing.process import broker_process
from grete.testing.routed_wire import open_wire
from tools import kafka_dist
from tools.reference_kafka import ReferenceKafka

D = DescribeShareGroupOffsetsRequest
ACCEPT = 1


class Restartable:
    """One broker of the target (every broker of a cluster target) that can be SIGKILLed and started
    again on the same data."""

    def __init__(self, target: str, stack: ExitStack) -> None:
        self.target, self.stack = target, stack
        self.ref: ReferenceKafka | None = None
        self.data = Path(tempfile.mkdtemp(prefix="grete-share-restart-"))
        self.inner: ExitStack | None = None
        self.bootstrap = ""
        self.nodes: GreteCluster | None = None
        if target == "grete":
            self._start_grete()
        elif target == "grete-kraft":  # every broker of a cluster of its own is killed and restarted
            self.nodes = stack.enter_context(cluster(3, directory=self.data, controllers=1))
            self.bootstrap = self.nodes.bootstrap_servers
        else:
            version = target.removeprefix("kafka-")
            kafka_dist.fetch(version)
            self.ref = stack.enter_context(ReferenceKafka(version))
            self.bootstrap = self.ref.bootstrap

    def _start_grete(self) -> None:
        self.inner = ExitStack()
        running = self.inner.enter_context(broker_process(data_dir=self.data))
        self.process = running
        self.bootstrap = running.bootstrap_servers

    def kill_and_restart(self) -> None:
        if self.nodes is not None:
            brokers = sorted(self.nodes.brokers)
            for broker_id in brokers:
                self.nodes.kill_broker(broker_id)
            self.nodes.start_brokers(brokers)
            return
        if self.ref is not None:
            self.ref.kill()
            self.ref.restart()
            return
        assert self.inner is not None
        self.process.process.kill()
        self.process.process.wait(10)
        self.inner.close()
        self._start_grete()

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
        shutil.rmtree(self.data, ignore_errors=True)

    def wire(self) -> Wire:
        return open_wire(self.bootstrap)


@pytest.fixture
def node(target: str) -> Iterator[Restartable]:
    if target.startswith("kafka-3"):
        pytest.skip("Kafka 3.9 has no share groups")
    with ExitStack() as stack:
        running = Restartable(target, stack)
        try:
            yield running
        finally:
            running.close()


def acquire(wire: Wire, group: str, member: str, topic_id: Any) -> list[int]:
    """The offsets a new share session of the member acquires from partition 0."""
    fetch = ShareFetchRequest(group_id=group, member_id=member, share_session_epoch=0, max_wait_ms=5000,
                              min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=[
                                  ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
                                      ShareFetchRequest.FetchPartition(partition_index=0)])])
    got = call(wire, fetch, ShareFetchResponse, 1, lambda r: r.error_code)
    assert got.error_code == 0, got.error_message
    return [o for t in got.responses for p in t.partitions for a in p.acquired_records
            for o in range(a.first_offset, a.last_offset + 1)]


def accept_all(wire: Wire, group: str, member: str, topic_id: Any, count: int) -> None:
    """Acquire ``count`` records of partition 0 and accept them in the same share session."""
    assert acquire(wire, group, member, topic_id) == list(range(count))
    ack = ShareAcknowledgeRequest(group_id=group, member_id=member, share_session_epoch=1, topics=[
        ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=topic_id, partitions=[
            ShareAcknowledgeRequest.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                ShareAcknowledgeRequest.AcknowledgementBatch(first_offset=0, last_offset=count - 1,
                                                             acknowledge_types=[ACCEPT])])])])
    acked = wire.call(ack, ShareAcknowledgeResponse, 1)
    assert acked.error_code == 0 and all(p.error_code == 0 for t in acked.responses for p in t.partitions), acked


def described(wire: Wire, group: str) -> Any:
    (g,) = call(wire, ShareGroupDescribeRequest(group_ids=[group]), ShareGroupDescribeResponse, 1,
                lambda r: r.groups[0].error_code).groups
    assert g.error_code == 0, g.error_message
    return g


def listed_share_groups(wire: Wire) -> dict[str, str]:
    r = call(wire, ListGroupsRequest(states_filter=[], types_filter=["share"]), ListGroupsResponse, 5,
             lambda r: r.error_code)
    return {g.group_id: g.group_state for g in r.groups}


def start_offset(wire: Wire, group: str, topic: str) -> int:
    code, offset = describe_offsets(wire, group, topic)
    assert code == 0
    return int(offset)


def produce(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(records):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0


def prepare(bootstrap: str, group: str, records: int) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    produce(bootstrap, topic, records)
    return topic


def find_coordinator(wire: Wire, group: str) -> None:
    """As a client does first: on a new broker this creates ``__consumer_offsets``."""
    found = call(wire, FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse, 4,
                 lambda r: r.coordinators[0].error_code)
    assert found.coordinators[0].error_code == 0


def logged_group(bootstrap: str, group: str) -> ShareGroup:
    """The group as its records in ``__consumer_offsets`` say, read back by grete's decoder: on
    Kafka this checks the format grete writes is the one Kafka writes."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        count = len(consumer.list_topics("__consumer_offsets", 10).topics["__consumer_offsets"].partitions)
        consumer.assign([TopicPartition("__consumer_offsets", partition_for(group, count), OFFSET_BEGINNING)])
        records: list[tuple[bytes, bytes | None]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is None:
                continue
            if m.error() is not None:
                break  # the end of the partition
            records.append((m.key(), m.value()))
    finally:
        consumer.close()
    return share_records.load(records)[group]


def same_group(logged: ShareGroup, described: Any) -> None:
    assert (logged.epoch, logged.assignment_epoch) == (described.group_epoch, described.assignment_epoch)
    members = {m.member_id: (m.member_epoch, m.subscribed_topic_names, m.client_id,
                             {t.topic_id: t.partitions for t in m.assignment.topic_partitions})
               for m in described.members}
    assert {m.member_id: (m.epoch, m.subscribed, m.client_id, m.assignment)
            for m in logged.members.values()} == members


def test_a_share_group_outlives_a_restart(node: Restartable) -> None:
    group = f"share-{uuid.uuid4().hex[:8]}"
    topic = prepare(node.bootstrap, group, 4)
    wire = node.wire()
    try:
        find_coordinator(wire, group)
        leaver, topic_id, _ = join(wire, group, topic)
        accept_all(wire, group, leaver, topic_id, 4)
        stayer, _, stayer_epoch = join(wire, group, topic)
        assert heartbeat(wire, group, leaver, -1, topic).error_code == 0
        before = described(wire, group)
        # Let the stayer catch up with the epoch its peer's leaving made.
        hb = heartbeat(wire, group, stayer, stayer_epoch, topic)
        assert hb.error_code == 0, hb.error_message
        stayer_epoch = hb.member_epoch
        before = described(wire, group)
        assert before.group_state == "Stable" and [m.member_id for m in before.members] == [stayer]
        # Kafka answers the start offset it last persisted (0 here), grete its current one (4).
        offset_before = start_offset(wire, group, topic)
    finally:
        wire.close()

    node.kill_and_restart()

    wire = node.wire()
    try:
        find_coordinator(wire, group)
        after = described(wire, group)
        assert listed_share_groups(wire).get(group) == "Stable"
        assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
        assert [m.member_id for m in after.members] == [stayer]
        assert after.members[0].member_epoch == stayer_epoch
        assert after.members[0].subscribed_topic_names == [topic]
        assert start_offset(wire, group, topic) == offset_before
        # The member that was in the group goes on with its epoch; the one that left is unknown.
        hb = heartbeat(wire, group, stayer, stayer_epoch, topic)
        assert hb.error_code == 0, hb.error_message
        # The accepted records are not delivered again: the stayer's first records are the new ones.
        produce(node.bootstrap, topic, 2)
        assert acquire(wire, group, stayer, topic_id)[0] == 4
        assert heartbeat(wire, group, leaver, before.group_epoch, topic).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        # A new member's epoch continues from the group's.
        _, _, newcomer_epoch = join(wire, group, topic)
        assert newcomer_epoch > before.group_epoch
        same_group(logged_group(node.bootstrap, group), described(wire, group))
        # Every member gone: the group stays, Empty.
        for m in described(wire, group).members:
            assert heartbeat(wire, group, m.member_id, -1, topic).error_code == 0
        emptied = described(wire, group)
        assert emptied.group_state == "Empty"
        same_group(logged_group(node.bootstrap, group), emptied)
    finally:
        wire.close()
