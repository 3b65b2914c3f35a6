"""Auto-creation (a Metadata request allowing it) of a topic that exists in ZooKeeper but that the asked
broker has not heard of yet, on grete and on Apache Kafka 3.9.2: LEADER_NOT_AVAILABLE (Kafka's
AutoTopicCreationManager turns the TOPIC_ALREADY_EXISTS of its ZooKeeper write into it), which clients
retry. The controller is paused while the topic is written to ZooKeeper, so no UpdateMetadata can
tell the asked broker of it first."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import cluster_helpers as h
from cluster_targets import ClusterTarget

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import MetadataRequest, MetadataResponse
from grete.testing import _wire

METADATA_VERSION = 12  # Kafka 3.9.2's highest
# Kafka's clients give a request request.timeout.ms, 30 s by default: an answer within that is in time.
CLIENT_TIMEOUT_S = 25.0


def metadata_topic(broker: Any, topic: str, auto_create: bool) -> MetadataResponse.MetadataResponseTopic:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=auto_create)
    answer = _wire.call(broker.host, broker.port, request, MetadataResponse, METADATA_VERSION,
                        timeout=CLIENT_TIMEOUT_S)
    return answer.topics[0]


def write_topic_as_kafka(zk: Any, topic: str, replicas: list[int]) -> None:
    """AdminZkClient's writes: /config/topics/<t>, then /brokers/topics/<t> (version 3, with an id)."""
    topic_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    zk.create(f"/config/topics/{topic}", json.dumps({"version": 1, "config": {}}).encode())
    zk.create(f"/brokers/topics/{topic}", json.dumps(
        {"partitions": {"0": replicas}, "topic_id": topic_id, "adding_replicas": {}, "removing_replicas": {},
         "version": 3}, separators=(",", ":")).encode())


def test_auto_creating_a_topic_not_yet_learned_is_leader_not_available(cluster_target: ClusterTarget) -> None:
    name = h.unique("auto")
    zk = h.zk_client(cluster_target.zk_connect)
    try:
        controller = h.zk_json(zk, "/controller")["brokerid"]
        asked = cluster_target.cluster.brokers[next(b for b in cluster_target.broker_ids if b != controller)]
        cluster_target.cluster.pause_broker(controller)
        try:
            write_topic_as_kafka(zk, name, cluster_target.broker_ids)
            unknown = metadata_topic(asked, name, auto_create=False).error_code
            creating = metadata_topic(asked, name, auto_create=True).error_code
        finally:
            cluster_target.cluster.resume_broker(controller)
    finally:
        zk.stop()
    assert (ErrorCode(unknown).name, ErrorCode(creating).name) == ("UNKNOWN_TOPIC_OR_PARTITION", "LEADER_NOT_AVAILABLE")
    # Retried once the controller has told every broker, it is there, led by its first replica.
    found = h.wait_until(lambda: (t := metadata_topic(asked, name, auto_create=True)).error_code == 0 and t,
                         what=f"{name} in the asked broker's Metadata")
    assert [p.leader_id for p in found.partitions] == [cluster_target.broker_ids[0]]


def test_auto_creating_a_new_topic_answers_before_its_leaders_are_elected(cluster_target: ClusterTarget) -> None:
    """With the controller paused nobody elects the new topic's leaders; the broker still answers
    within the client's timeout (LEADER_NOT_AVAILABLE, the topic written to ZooKeeper), as Kafka's
    AutoTopicCreationManager does, and the client finds it led once the controller is back."""
    name = h.unique("auto-new")
    zk = h.zk_client(cluster_target.zk_connect)
    try:
        controller = h.zk_json(zk, "/controller")["brokerid"]
        asked = cluster_target.cluster.brokers[next(b for b in cluster_target.broker_ids if b != controller)]
        cluster_target.cluster.pause_broker(controller)
        try:
            creating = metadata_topic(asked, name, auto_create=True).error_code
            written = zk.exists(f"/brokers/topics/{name}") is not None
        finally:
            cluster_target.cluster.resume_broker(controller)
    finally:
        zk.stop()
    assert (ErrorCode(creating).name, written) == ("LEADER_NOT_AVAILABLE", True)
    found = h.wait_until(lambda: (t := metadata_topic(asked, name, auto_create=True)).error_code == 0 and t,
                         what=f"{name} in the asked broker's Metadata")
    assert all(p.leader_id >= 0 for p in found.partitions)
