"""A streams group (KIP-1071) in a 3-broker grete cluster on ZooKeeper: the coordinator creates the
internal topics cluster-wide (every broker sees them), assigns the tasks, and after its broker is
killed the next coordinator serves the group from the replicated ``__consumer_offsets``."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from grete.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)
from grete.testing import _wire
from grete.testing.cluster import GreteCluster
from tests.cluster.conftest import wait_until
from tests.cluster.test_cluster_zookeeper import create

pytestmark = pytest.mark.slow
Q = StreamsGroupHeartbeatRequest
COORDINATOR_ERRORS = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def coordinator(cluster: GreteCluster, group: str, avoid: int | None = None) -> int:
    def find() -> int | None:
        for broker_id, process in cluster.brokers.items():
            if broker_id == avoid:
                continue
            found = _wire.call(process.host, process.port, FindCoordinatorRequest(key=group, key_type=0),
                               FindCoordinatorResponse, 3)
            if found.error_code == 0 and found.node_id != avoid:
                return int(found.node_id)
        return None
    return int(wait_until(find, 60, "a group coordinator"))


def topology(source: str, app: str) -> Any:
    return Q.Topology(epoch=0, subtopologies=[
        Q.Subtopology(subtopology_id="0", source_topics=[source], source_topic_regex=[], state_changelog_topics=[],
                      repartition_sink_topics=[f"{app}-repartition"], repartition_source_topics=[],
                      copartition_groups=[]),
        Q.Subtopology(subtopology_id="1", source_topics=[], source_topic_regex=[], repartition_sink_topics=[],
                      state_changelog_topics=[Q.TopicInfo(name=f"{app}-changelog", partitions=0, replication_factor=2,
                                                          topic_configs=[])],
                      repartition_source_topics=[Q.TopicInfo(name=f"{app}-repartition", partitions=0,
                                                             replication_factor=2, topic_configs=[])],
                      copartition_groups=[])])


def test_streams_group_in_a_cluster_survives_its_coordinator(grete_cluster: GreteCluster) -> None:
    source, app = f"lines-{uuid.uuid4().hex[:8]}", f"app-{uuid.uuid4().hex[:8]}"
    create(grete_cluster, source, 3, 2)
    node = coordinator(grete_cluster, app)
    process = grete_cluster.brokers[node]

    def beat(epoch: int) -> Any:
        joining = epoch == 0
        request = Q(group_id=app, member_id="m1", member_epoch=epoch, endpoint_information_epoch=0,
                    rebalance_timeout_ms=30000 if joining else -1, topology=topology(source, app) if joining else None,
                    active_tasks=[] if joining else None, standby_tasks=[] if joining else None,
                    warmup_tasks=[] if joining else None, process_id="p1" if joining else None)
        return _wire.call(process.host, process.port, request, StreamsGroupHeartbeatResponse, 0)

    joined = wait_until(lambda: (r := beat(0)).error_code not in COORDINATOR_ERRORS and r, 60, "the coordinator")
    assert joined.error_code == 0, joined.error_message
    # The internal topics exist on every broker, with the input's 3 partitions and 2 replicas.
    for other in grete_cluster.brokers.values():
        def sizes(broker: Any = other) -> dict[str, tuple[int, int]] | None:
            meta = _wire.call(broker.host, broker.port, MetadataRequest(topics=None), MetadataResponse, 12)
            found = {t.name: (len(t.partitions), len(t.partitions[0].replica_nodes)) for t in meta.topics
                     if t.name.startswith(app) and t.partitions}
            return found if len(found) == 2 else None
        assert wait_until(sizes, 30, "internal topics") == {f"{app}-repartition": (3, 2), f"{app}-changelog": (3, 2)}
    epoch, deadline = joined.member_epoch, time.monotonic() + 30
    while True:  # past the initial delay (3 s) and the topics' creation
        answer = beat(epoch)
        assert answer.error_code == 0, answer.error_message
        epoch = answer.member_epoch
        if answer.active_tasks:
            break
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert sum(len(t.partitions) for t in answer.active_tasks) == 6

    # Killed right after the last answer: the followers have the write (acks=all) but may not yet
    # know the high watermark past it; the next coordinator loads to its log end, as Kafka's does.
    grete_cluster.kill_broker(node)
    try:
        successor = coordinator(grete_cluster, app, avoid=node)
        follower = grete_cluster.brokers[successor]

        def describe() -> Any:
            group = _wire.call(follower.host, follower.port, StreamsGroupDescribeRequest(group_ids=[app]),
                               StreamsGroupDescribeResponse, 0).groups[0]
            return group if group.error_code not in COORDINATOR_ERRORS else None

        group = wait_until(describe, 60, "the group on the next coordinator")
        assert (group.error_code, group.assignment_epoch) == (0, epoch)
        [member] = group.members
        assert member.member_id == "m1" and sum(len(t.partitions) for t in member.assignment.active_tasks) == 6
    finally:
        grete_cluster.start_broker(node)
