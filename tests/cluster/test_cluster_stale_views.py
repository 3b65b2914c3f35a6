"""ZooKeeper ahead of what a broker or the controller knows: each must take it as Kafka does.

* Auto-creation (a Metadata request allowing it) of a topic that exists in ZooKeeper but that the
  asked broker has not learned of yet (its UpdateMetadata still on the way): Kafka answers
  LEADER_NOT_AVAILABLE, which clients retry, never TOPIC_ALREADY_EXISTS, which they take as fatal
  (Connect's TopicExistsException, librdkafka's permanent delivery error). Made deterministic by
  pausing the controller while the topic is written to ZooKeeper as AdminZkClient writes it.
* A deletions event carries the /admin/delete_topics children its watch saw, and events queue, so
  by the time one runs some of its markers can be gone (a deletion completed in between). A missing
  marker is fine, as in Kafka's deleteTopicDeletions, and never keeps the event's other topics from
  being handled. Run on a controller of its own, in a ZooKeeper chroot the cluster does not see."""

from __future__ import annotations

import asyncio
import json

import pytest
from kazoo.client import KazooClient

from grete.broker.cluster.controller import Controller, ControllerSettings
from grete.broker.cluster.state import ControllerContext
from grete.coordinator.metadata import new_topic_id
from grete.coordinator.zookeeper import zk_layout as zkl
from grete.coordinator.zookeeper.zk_client import ZkClient
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import MetadataRequest, MetadataResponse
from grete.testing import _wire
from grete.testing.cluster import GreteCluster
from tests.cluster.conftest import wait_until

pytestmark = pytest.mark.slow

METADATA_VERSION = 12


def ask(cluster: GreteCluster, broker_id: int, topic: str, *, auto_create: bool) -> MetadataResponse.MetadataResponseTopic:
    process = cluster.brokers[broker_id]
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=auto_create)
    answer: MetadataResponse = _wire.call(process.host, process.port, request, MetadataResponse, METADATA_VERSION)
    return answer.topics[0]


def write_topic(zk: KazooClient, topic: str, brokers: list[int]) -> None:
    """What AdminZkClient writes: the config first, then the assignment (one partition)."""
    zk.create(zkl.config_path("topics", topic), zkl.encode_config({}), makepath=True)
    zk.create(zkl.topic_path(topic), zkl.encode_topic(zkl.TopicAssignment({0: brokers}, new_topic_id())))


def test_auto_creating_a_topic_not_yet_learned_is_leader_not_available(
        grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    controller = json.loads(zk.get(zkl.CONTROLLER)[0])["brokerid"]
    asked = next(b for b in sorted(grete_cluster.brokers) if b != controller)
    grete_cluster.pause_broker(controller)
    try:
        write_topic(zk, topic_name, sorted(grete_cluster.brokers))
        # The broker knows nothing of it: without auto-creation it is unknown...
        assert ask(grete_cluster, asked, topic_name, auto_create=False).error_code \
            == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # ...and creating it finds it in ZooKeeper: not there yet, as Kafka answers.
        answer = ask(grete_cluster, asked, topic_name, auto_create=True)
        assert answer.error_code == ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode(answer.error_code).name
    finally:
        grete_cluster.resume_broker(controller)
    # The client's retry finds it once the controller has told everyone.
    found = wait_until(lambda: (t := ask(grete_cluster, asked, topic_name, auto_create=True)).error_code == 0 and t,
                       what=f"broker {asked} to learn of {topic_name}")
    assert [p.leader_id for p in found.partitions] == [min(grete_cluster.brokers)]


def test_a_stale_deletions_event_handles_every_topic(grete_cluster: GreteCluster, zk: KazooClient,
                                                     topic_name: str) -> None:
    root = f"/{topic_name}-controller"
    zk.ensure_path(root + zkl.DELETE_TOPICS)
    zk.create(root + zkl.CONTROLLER_EPOCH, zkl.encode_controller_epoch(1))
    # "a-gone": deleted already, its marker with it; "b-unknown": marked, but no such topic;
    # "c-real": marked, its replica's broker down, so its deletion waits.
    zk.create(root + zkl.delete_topic_path("b-unknown"))
    zk.create(root + zkl.delete_topic_path("c-real"))
    fence = zk.get(root + zkl.CONTROLLER_EPOCH)[1].version

    async def run() -> set[str]:
        client = ZkClient(grete_cluster.zookeeper.connect + root, session_timeout_ms=6000,
                          connection_timeout_ms=30000)
        await client.start()
        try:
            controller = Controller(client, ControllerSettings(1, "PLAINTEXT"))
            controller.ctx = ControllerContext(epoch=1, epoch_zk_version=fence, controller_id=1)
            controller.ctx.assignments["c-real"] = zkl.TopicAssignment({0: [2]}, new_topic_id())
            controller.active = True
            await controller.deletion.on_deletions(["a-gone", "b-unknown", "c-real"])
            return controller.ctx.deleting
        finally:
            await client.close()
    deleting = asyncio.run(run())
    assert zk.exists(root + zkl.delete_topic_path("b-unknown")) is None  # the marker of no topic is dropped
    assert deleting == {"c-real"}  # queued for deletion, waiting for broker 2
    assert zk.exists(root + zkl.delete_topic_path("c-real")) is not None  # kept until its deletion completes
    zk.delete(root, recursive=True)
