"""Share groups in a grete cluster: a share partition's state lives with its share coordinator (the
leader of its ``__share_group_state`` partition), so the partition's leader can die without losing it.
Records acknowledged before the SIGKILL are never delivered again; records that were acquired but not
acknowledged are delivered again by the new leader, with their delivery count kept."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
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
                                 min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=[
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


def test_acknowledged_state_survives_the_share_partition_leaders_death(grete_cluster: GreteCluster) -> None:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all", "linger.ms": 0})
    zk = KazooClient(hosts=grete_cluster.zookeeper.connect)
    zk.start(10)
    try:
        live = sorted(grete_cluster.brokers)
        leader = leader_of(zk, topic, 0)
        topic_id = uuid_from_kafka(json.loads(zk.get(f"/brokers/topics/{topic}")[0])["topic_id"])
        # A group whose share coordinator is another broker than the partition's leader: the leader
        # writes over the inter-broker channel, and the coordinator outlives it.
        while True:
            group = f"sg-{uuid.uuid4().hex[:8]}"
            coordinator = wait_until(lambda g=group: share_coordinator(grete_cluster, leader, g, topic_id), 30,
                                     "the share coordinator")
            if coordinator != leader:
                break
        member, assigned = join(grete_cluster, live, group, topic)
        assert assigned == topic_id
        with closing(wire_to(grete_cluster, leader)) as w:
            # The first fetch initializes the share partition at the end of the log (latest): 0.
            wait_until(lambda: acquire(w, group, member, topic_id, 0) == (0, []), 30, "the share partition")
            for i in range(10):
                producer.produce(topic, f"r{i}".encode(), partition=0)
                producer.flush(30)  # one batch per record: acknowledgements can split anywhere
            code, got = acquire(w, group, member, topic_id, 1)
            assert code == 0 and [(a, b) for a, b, _ in got] == [(i, i) for i in range(10)]
            B = ShareAcknowledgeRequest
            acked = w.call(B(group_id=group, member_id=member, share_session_epoch=2, topics=[B.AcknowledgeTopic(
                topic_id=topic_id, partitions=[B.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                    B.AcknowledgementBatch(first_offset=0, last_offset=3, acknowledge_types=[1]),
                    B.AcknowledgementBatch(first_offset=4, last_offset=4, acknowledge_types=[3])])])]),
                ShareAcknowledgeResponse, 1)
            assert acked.error_code == 0 and acked.responses[0].partitions[0].error_code == 0
        # 0-3 accepted, 4 rejected, 5-9 still acquired (60 s locks) when the leader dies.
        started = time.monotonic()
        grete_cluster.kill_broker(leader)
        live = [b for b in live if b != leader]
        new_leader = wait_until(lambda: (lambda n: n if n in live else None)(leader_of(zk, topic, 0)), 30,
                                "a new leader")
        member, topic_id = join(grete_cluster, live, group, topic)
        with closing(wire_to(grete_cluster, new_leader)) as w:
            found: list[tuple[int, int, int]] = []

            def redelivered() -> bool:
                code, got = acquire(w, group, member, topic_id, 0)
                assert code in (0, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), ErrorCode(code).name
                found.extend(got)
                return bool(got)

            wait_until(redelivered, 30, "records from the new leader")
        offsets = sorted(o for first, last, _ in found for o in range(first, last + 1))
        assert offsets == [5, 6, 7, 8, 9]  # nothing acknowledged (0-3) or rejected (4) comes back
        assert {count for _, _, count in found} == {2}  # the first delivery was counted
        assert time.monotonic() - started < 40
    finally:
        zk.stop()
        zk.close()
