"""Fetch refusals on one node. KIP-951: a Fetch v16+ refused with FENCED_LEADER_EPOCH names the
current leader and its endpoint; older versions carry no hint. KIP-516: INCONSISTENT_TOPIC_ID. (Produce's NOT_LEADER_OR_FOLLOWER hint needs a second
broker: tests/cluster/test_fetch_from_follower.py.)"""

from __future__ import annotations

import uuid

import pytest

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import FetchRequest, FetchResponse
from grete.testing._wire import Wire


def fetch(wire: Wire, topic: str, leader_epoch: int, version: int) -> FetchResponse:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=leader_epoch, fetch_offset=0, partition_max_bytes=1 << 20)])])
    return wire.call(req, FetchResponse, version)


@pytest.mark.parametrize("version", [12, 15, 16, 18])
def test_a_fenced_fetch_names_the_leader_from_v16(grete_broker, topic_name, version):
    grete_broker.create_topic(topic_name)
    partition = grete_broker.broker.partitions[(topic_name, 0)]
    grete_broker.call(setattr, partition, "leader_epoch", 3)  # as after three leader changes
    wire = Wire(grete_broker.host, grete_broker.port)
    try:
        if version >= 13:  # topics by id
            req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
                topic_id=partition.topic_id, partitions=[FetchRequest.FetchPartition(
                    partition=0, current_leader_epoch=1, fetch_offset=0, partition_max_bytes=1 << 20)])])
            answer = wire.call(req, FetchResponse, version)
        else:
            answer = fetch(wire, topic_name, 1, version)
    finally:
        wire.close()
    data = answer.responses[0].partitions[0]
    assert data.error_code == ErrorCode.FENCED_LEADER_EPOCH
    node = grete_broker.broker.node_id
    if version >= 16:
        assert (data.current_leader.leader_id, data.current_leader.leader_epoch) == (node, 3)
        assert [(e.node_id, e.host, e.port) for e in answer.node_endpoints] == [
            (node, grete_broker.host, grete_broker.port)]
    else:
        assert (data.current_leader.leader_id, answer.node_endpoints) == (-1, [])


def test_a_replica_of_another_incarnation_answers_inconsistent_topic_id(grete_broker, topic_name):
    """v13+: the id resolves to the topic's name, but the replica hosted under that name belongs to
    another topic id (a deletion and re-creation not applied here yet): INCONSISTENT_TOPIC_ID."""
    grete_broker.create_topic(topic_name)
    partition = grete_broker.broker.partitions[(topic_name, 0)]
    current = partition.topic_id
    grete_broker.call(setattr, partition, "topic_id", uuid.uuid4())
    wire = Wire(grete_broker.host, grete_broker.port)
    try:
        req = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[FetchRequest.FetchTopic(
            topic_id=current, partitions=[FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                      partition_max_bytes=1 << 20)])])
        data = wire.call(req, FetchResponse, 13).responses[0].partitions[0]
        by_name = fetch(wire, topic_name, -1, 12).responses[0].partitions[0]  # names are not checked
    finally:
        wire.close()
    assert (data.error_code, by_name.error_code) == (ErrorCode.INCONSISTENT_TOPIC_ID, 0)
