"""Partition reassignments through grete brokers of a KRaft cluster (three grete brokers under a grete
controller, or under an Apache Kafka 4.3.1 controller): each broker forwards AlterPartitionReassignments
and ListPartitionReassignments to the active controller, which records the reassignment; the brokers
act on the records: a new replica follows and catches up, the reassignment completes, and the replica
left out is deleted from its broker's disk. One in progress is listed; cancelled, the partition gets
its replicas back. Each request is asked of one named broker, never of the controller.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
    MetadataRequest,
)
from tools import kafka_admin
from tools.kraft_quorum import (
    GreteBroker,
    Quorum,
    consume,
    produce,
    start_grete_broker,
    start_quorum,
    wait_for,
)

pytestmark = pytest.mark.slow

IDS = (10, 11, 12)
# A killed grete broker is fenced at once by a grete controller (its port refuses); no session
# expires during a test.
CONTROLLER = {"broker.session.timeout.ms": "30000"}


class Cluster:
    def __init__(self, quorum: Quorum, brokers: list[GreteBroker]) -> None:
        self.quorum = quorum
        self.brokers = {b.node_id: b for b in brokers}


@pytest.fixture(scope="module", params=["grete", pytest.param("kafka", marks=pytest.mark.long)])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp(f"reassign-{request.param}")
    quorum = start_quorum([request.param], workdir / "quorum", lambda _kind: CONTROLLER)
    started: list[Any] = [quorum]
    try:
        quorum.leader_view()
        brokers = [start_grete_broker(quorum, i, workdir / f"broker{i}") for i in IDS]
        started += brokers
        for broker in brokers:
            wait_for(lambda b=broker: _listed(b) == set(IDS), 120, f"broker {broker.node_id} listing all")
        yield Cluster(quorum, brokers)
    finally:
        for thing in reversed(started):
            thing.stop() if isinstance(thing, Quorum) else thing.kill()


def _listed(broker: GreteBroker) -> set[int] | None:
    try:
        answer = kafka_admin.call(broker.bootstrap, MetadataRequest(topics=[]), 9)
    except OSError:  # not up yet
        return None
    return {b.node_id for b in answer.brokers}


def _create(broker: GreteBroker, name: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the answer
    admin.create_topics([NewTopic(name, 1, replica_assignment=[replicas])])[name].result(30)
    wait_for(lambda: _partition(broker, name) is not None, 30, f"{name} in the metadata of {broker.node_id}")


def _reassign(broker: GreteBroker, name: str, index: int, replicas: list[int] | None) -> Any:
    request = AlterPartitionReassignmentsRequest(timeout_ms=30000, topics=[
        AlterPartitionReassignmentsRequest.ReassignableTopic(name=name, partitions=[
            AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=index, replicas=replicas)])])
    answer = kafka_admin.call(broker.bootstrap, request, 0, timeout=40)
    assert answer.error_code == ErrorCode.NONE, answer
    return answer.responses[0].partitions[0]


def _ongoing(broker: GreteBroker) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
    answer = kafka_admin.call(broker.bootstrap, ListPartitionReassignmentsRequest(timeout_ms=30000, topics=None), 0,
                              timeout=40)
    assert answer.error_code == ErrorCode.NONE, answer
    return {(t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in answer.topics for p in t.partitions}


def _partition(broker: GreteBroker, name: str) -> tuple[int, list[int], list[int]] | None:
    """(leader, replicas, ISR) of ``name``-0 as ``broker``'s metadata has it."""
    answer = kafka_admin.call(broker.bootstrap, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
        name=name)]), 9)
    found = next((t for t in answer.topics if t.name == name and t.error_code == ErrorCode.NONE), None)
    if found is None or not found.partitions:
        return None
    part = found.partitions[0]
    return part.leader_id, list(part.replica_nodes), sorted(part.isr_nodes)


def _replica_dirs(broker: GreteBroker, name: str) -> list[Path]:
    return [p for p in broker.data.iterdir() if p.name.startswith(f"{name}-0")]


def test_a_replica_moves_to_another_broker(cluster: Cluster) -> None:
    """[10, 11] -> [12, 11]: 12 catches up, becomes the leader (10 is removed), 10's replica is deleted;
    everything written before and after is read from the new replica set."""
    b10, b11, b12 = (cluster.brokers[i] for i in IDS)
    _create(b10, "moving", [10, 11])
    before = produce(b10.bootstrap, "moving", 0, 50)
    answer = _reassign(b11, "moving", 0, [12, 11])
    assert (answer.error_code, answer.error_message) == (ErrorCode.NONE, None)
    wait_for(lambda: _partition(b12, "moving") == (12, [12, 11], [11, 12]) or None, 60, "the reassignment done")
    wait_for(lambda: not _replica_dirs(b10, "moving"), 60, "broker 10's replica deleted")
    assert _replica_dirs(b12, "moving")
    assert _ongoing(b10) == {}
    after = produce(b12.bootstrap, "moving", 50, 50)
    assert consume(b12.bootstrap, "moving", 100, group="after-move") == before + after


def test_a_shrink_completes_at_once(cluster: Cluster) -> None:
    """[10, 11] -> [11]: the ISR already holds the target, so nothing is left in progress; the leader
    moves to 11 and 10 deletes its replica."""
    b10, b11, _ = (cluster.brokers[i] for i in IDS)
    _create(b10, "shrinking", [10, 11])
    written = produce(b10.bootstrap, "shrinking", 0, 20)
    wait_for(lambda: _partition(b11, "shrinking") == (10, [10, 11], [10, 11]) or None, 30, "both in sync")
    assert _reassign(b10, "shrinking", 0, [11]).error_code == ErrorCode.NONE
    assert _ongoing(b11) == {}
    wait_for(lambda: _partition(b10, "shrinking") == (11, [11], [11]) or None, 30, "11 alone")
    wait_for(lambda: not _replica_dirs(b10, "shrinking"), 60, "broker 10's replica deleted")
    assert consume(b11.bootstrap, "shrinking", 20, group="after-shrink") == written


def test_what_kafka_refuses_is_refused(cluster: Cluster) -> None:
    b10, b11, _ = (cluster.brokers[i] for i in IDS)
    _create(b10, "refused", [10])
    unknown = _reassign(b11, "refused", 0, [10, 99])
    assert unknown.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert unknown.error_message == "The manual partition assignment includes broker 99, but no such broker is registered."
    assert _reassign(b11, "refused", 7, [10]).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _reassign(b11, "no-such-topic", 0, [10]).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _reassign(b11, "refused", 0, None).error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    assert _partition(b10, "refused") == (10, [10], [10])


def test_an_unfinished_reassignment_is_listed_and_cancelled(cluster: Cluster) -> None:
    """The target broker is down: the reassignment cannot complete, is listed, and its cancellation
    gives the partition its replicas back."""
    b10, b11, b12 = (cluster.brokers[i] for i in IDS)
    _create(b10, "parked", [10])
    b12.kill()  # still registered (fenced): a valid target that cannot catch up
    answer = _reassign(b11, "parked", 0, [10, 12])
    assert answer.error_code == ErrorCode.NONE, answer
    assert _ongoing(b11) == {("parked", 0): ([10, 12], [12], [])}
    wait_for(lambda: _partition(b10, "parked") == (10, [10, 12], [10]) or None, 30, "12 among the replicas")
    assert _reassign(b11, "parked", 0, None).error_code == ErrorCode.NONE
    assert _ongoing(b10) == {}
    wait_for(lambda: _partition(b10, "parked") == (10, [10], [10]) or None, 30, "the original replicas back")
    assert _reassign(b11, "parked", 0, None).error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
