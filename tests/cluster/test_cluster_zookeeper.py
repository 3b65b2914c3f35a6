"""A 3-broker grete cluster on Debian's ZooKeeper: what it writes to ZooKeeper, what clients see."""

from __future__ import annotations

import asyncio
import json
from contextlib import closing

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from kazoo.client import KazooClient

from grete.broker.cluster.controller import Controller, ControllerMoved, ControllerSettings
from grete.broker.cluster.state import ControllerContext
from grete.coordinator.zookeeper import zk_layout as zkl
from grete.coordinator.zookeeper.zk_client import Op, ZkClient
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ProduceRequest,
    ProduceResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from grete.protocol.records.record import Record, build_batch
from grete.testing import _wire
from grete.testing.cluster import GreteCluster, cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until
from tools.kafka_admin import alter_client_quotas, describe_client_quotas

pytestmark = pytest.mark.slow


def admin(cluster: GreteCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap_servers})


def create(cluster: GreteCluster, name: str, partitions: int, replication: int) -> None:
    client = admin(cluster)  # kept: a client collected mid-call fails its futures
    futures = client.create_topics([NewTopic(name, partitions, replication)], operation_timeout=30)
    futures[name].result(30)


def test_registration_reads_like_kafkas(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    assert sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"]
    for broker_id, process in grete_cluster.brokers.items():
        data, stat = zk.get(f"/brokers/ids/{broker_id}")
        raw = json.loads(data)
        assert set(raw) == {"features", "listener_security_protocol_map", "endpoints", "jmx_port", "port",
                            "host", "version", "timestamp"}
        assert raw["endpoints"] == [f"PLAINTEXT://127.0.0.1:{process.port}"]
        assert stat.ephemeralOwner != 0  # it goes with the broker's session
        assert stat.version == 1  # Kafka's create-empty-then-set registration
    for path in zkl.PERSISTENT_PATHS:
        assert zk.exists(path) is not None, path
    controller = json.loads(zk.get("/controller")[0])
    assert controller["version"] == 2 and controller["brokerid"] in (1, 2, 3)
    assert int(zk.get("/controller_epoch")[0]) >= 1
    cluster_id = json.loads(zk.get("/cluster/id")[0])
    assert cluster_id["version"] == "1"
    assert json.loads(zk.get("/feature")[0]) == {"features": {}, "version": 2, "status": 1}
    assert zk.get("/brokers/ids")[0] is None  # container znodes hold null data, as Kafka's


def test_metadata_lists_every_broker_and_the_controller(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    controller = json.loads(zk.get("/controller")[0])["brokerid"]
    cluster_id = json.loads(zk.get("/cluster/id")[0])["id"]
    for process in grete_cluster.brokers.values():
        md = AdminClient({"bootstrap.servers": process.bootstrap_servers}).list_topics(timeout=10)
        assert sorted(md.brokers) == [1, 2, 3]
        assert md.controller_id == controller
        assert md.cluster_id == cluster_id


def test_topic_with_three_replicas(grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    create(grete_cluster, topic_name, 6, 3)
    raw = json.loads(zk.get(f"/brokers/topics/{topic_name}")[0])
    assert raw["version"] == 3 and raw["adding_replicas"] == {} and raw["removing_replicas"] == {}
    assert sorted(raw["partitions"]) == [str(p) for p in range(6)]
    leaders = set()
    for p, replicas in raw["partitions"].items():
        assert sorted(replicas) == [1, 2, 3]
        state = json.loads(zk.get(f"/brokers/topics/{topic_name}/partitions/{p}/state")[0])
        assert state == {"controller_epoch": state["controller_epoch"], "leader": replicas[0], "version": 1,
                         "leader_epoch": 0, "isr": replicas}
        leaders.add(replicas[0])
    assert leaders == {1, 2, 3}  # leadership spread over the brokers
    md = admin(grete_cluster).list_topics(topic_name, timeout=10).topics[topic_name]
    for p, meta in md.partitions.items():
        assert meta.replicas == raw["partitions"][str(p)]
        assert meta.leader == raw["partitions"][str(p)][0]
        assert meta.isrs == raw["partitions"][str(p)]


def test_topic_id_is_the_one_in_zookeeper(grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    create(grete_cluster, topic_name, 1, 2)
    in_zk = json.loads(zk.get(f"/brokers/topics/{topic_name}")[0])["topic_id"]
    for process in grete_cluster.brokers.values():
        client = AdminClient({"bootstrap.servers": process.bootstrap_servers})
        described = client.describe_topics(TopicCollection([topic_name]))[topic_name].result(10)
        # librdkafka prints ids in standard base64, Kafka in its URL-safe form.
        assert str(described.topic_id).replace("+", "-").replace("/", "_") == in_zk


def test_produce_and_consume_across_leaders(grete_cluster: GreteCluster, topic_name: str) -> None:
    create(grete_cluster, topic_name, 6, 2)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True})
    for i in range(300):
        producer.produce(topic_name, key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": grete_cluster.bootstrap_servers, "group.id": f"g-{topic_name}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic_name])
    seen: set[bytes] = set()
    wait_until(lambda: _poll_into(consumer, seen) >= 300, 60, "300 records")
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == {f"v{i}".encode() for i in range(300)}


def _poll_into(consumer: Consumer, seen: set[bytes]) -> int:
    for message in consumer.consume(100, 0.5):
        if message.error() is None:
            seen.add(message.value())
    return len(seen)


def test_produce_to_a_follower_is_not_leader(grete_cluster: GreteCluster, topic_name: str) -> None:
    create(grete_cluster, topic_name, 1, 3)
    # CreateTopics answers once the broker it asked knows the topic; the one Metadata goes to may
    # learn it a moment later (UpdateMetadata in flight), as with Kafka.
    client = admin(grete_cluster)
    md = wait_until(lambda: client.list_topics(topic_name, timeout=10).topics[topic_name].partitions.get(0),
                    what=f"{topic_name} in every broker's metadata")
    follower = next(b for b in md.replicas if b != md.leader)
    process = grete_cluster.brokers[follower]
    request = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic_name, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=_one_batch())])])
    response = _wire.call(process.host, process.port, request, ProduceResponse, 9)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def _one_batch() -> bytes:
    return bytes(build_batch([Record(0, 0, None, b"x")]))


def test_partitions_added_and_topic_deleted(grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    create(grete_cluster, topic_name, 2, 2)
    client = admin(grete_cluster)
    client.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(30)
    assert sorted(json.loads(zk.get(f"/brokers/topics/{topic_name}")[0])["partitions"]) == ["0", "1", "2", "3", "4"]
    wait_until(lambda: len(admin(grete_cluster).list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 5,
               what="5 partitions in Metadata")
    # Each replica's directory, once its broker has acted on the controller's LeaderAndIsr (which may
    # come a moment after another broker's Metadata lists the partitions).
    wait_until(lambda: len([d for b in grete_cluster.brokers.values() for d in b.data_dir.glob(f"{topic_name}-*")])
               == 10, what="5 partitions x 2 replicas on disk")
    client.delete_topics([topic_name])[topic_name].result(30)
    # Kafka's order: the topic znode, then its config, then the deletion marker, three writes in a row.
    wait_until(lambda: zk.exists(f"/admin/delete_topics/{topic_name}") is None, what="the deletion marker removed")
    assert zk.exists(f"/brokers/topics/{topic_name}") is None
    assert zk.exists(f"/config/topics/{topic_name}") is None
    wait_until(lambda: not [d for b in grete_cluster.brokers.values() for d in b.data_dir.glob(f"{topic_name}-*")
                            if not d.name.endswith("-delete")], what="the replicas deleted")
    assert topic_name not in admin(grete_cluster).list_topics(timeout=10).topics


def test_topic_config_reaches_every_broker(grete_cluster: GreteCluster, zk: KazooClient, topic_name: str) -> None:
    create(grete_cluster, topic_name, 1, 1)
    resource = ConfigResource("TOPIC", topic_name, set_config={"retention.ms": "123456"})
    client = admin(grete_cluster)
    client.alter_configs([resource])[resource].result(10)
    stored = json.loads(zk.get(f"/config/topics/{topic_name}")[0])
    assert stored == {"version": 1, "config": {"retention.ms": "123456"}}
    changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": f"topics/{topic_name}"} in changes

    def everywhere() -> bool:
        for process in grete_cluster.brokers.values():
            client = AdminClient({"bootstrap.servers": process.bootstrap_servers})
            found = client.describe_configs([ConfigResource("TOPIC", topic_name)])
            configs = next(iter(found.values())).result(10)
            del client
            if configs["retention.ms"].value != "123456":
                return False
        return True
    wait_until(everywhere, what="the config on every broker")


def test_client_quotas_in_zookeeper(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    first, *others = grete_cluster.brokers.values()
    alter_client_quotas(first.bootstrap_servers, {"client-id": "orders app"}, {"producer_byte_rate": 1024.0})
    alter_client_quotas(first.bootstrap_servers, {"user": "alice", "client-id": None},
                        {"request_percentage": 12.5})
    # Kafka 3.9's znodes: sanitized names, integer keys as integers, a change notification each.
    assert json.loads(zk.get("/config/clients/orders%20app")[0]) == {
        "version": 1, "config": {"producer_byte_rate": "1024"}}
    assert json.loads(zk.get("/config/users/alice/clients/<default>")[0]) == {
        "version": 1, "config": {"request_percentage": "12.5"}}
    changes = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": "users/alice/clients/<default>"} in changes
    wanted = {(("client-id", "orders app"),): {"producer_byte_rate": 1024.0},
              (("client-id", None), ("user", "alice")): {"request_percentage": 12.5}}
    wait_until(lambda: all(describe_client_quotas(b.bootstrap_servers) == wanted for b in others),
               what="the quotas on every broker")
    alter_client_quotas(first.bootstrap_servers, {"client-id": "orders app"}, {"producer_byte_rate": None})
    alter_client_quotas(first.bootstrap_servers, {"user": "alice", "client-id": None}, {"request_percentage": None})
    wait_until(lambda: all(describe_client_quotas(b.bootstrap_servers) == {} for b in others),
               what="the quotas gone from every broker")


def test_allocate_producer_ids_from_the_controller(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """KIP-730, as a Kafka 3.9 broker asks for its producer ids: the controller hands out the next
    block of /latest_producer_id_block to a registered broker with its current epoch."""
    controller = json.loads(zk.get("/controller")[0])["brokerid"]
    asker = next(b for b in grete_cluster.brokers if b != controller)
    epoch = zk.exists(f"/brokers/ids/{asker}").czxid

    def ask(broker: int, broker_id: int, broker_epoch: int) -> AllocateProducerIdsResponse:
        running = grete_cluster.brokers[broker]
        answer: AllocateProducerIdsResponse = _wire.call(
            running.host, running.port, AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=broker_epoch),
            AllocateProducerIdsResponse, 0)
        return answer
    first = ask(controller, asker, epoch)
    assert (first.error_code, first.producer_id_len) == (0, 1000) and first.producer_id_start % 1000 == 0
    block = json.loads(zk.get("/latest_producer_id_block")[0])
    assert (block["broker"], block["block_start"], block["block_end"]) == (
        asker, str(first.producer_id_start), str(first.producer_id_start + 999))
    assert ask(controller, asker, epoch).producer_id_start == first.producer_id_start + 1000
    assert ask(controller, asker, epoch + 1).error_code == ErrorCode.STALE_BROKER_EPOCH
    assert ask(controller, 99, epoch).error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert ask(asker, asker, epoch).error_code == ErrorCode.NOT_CONTROLLER


def test_replication_factor_above_live_brokers(grete_cluster: GreteCluster, topic_name: str) -> None:
    client = admin(grete_cluster)
    futures = client.create_topics([NewTopic(topic_name, 1, 4)])
    with pytest.raises(KafkaException) as failed:
        futures[topic_name].result(10)
    assert failed.value.args[0].code() == ErrorCode.INVALID_REPLICATION_FACTOR
    assert "larger than available brokers: 3" in failed.value.args[0].str()


def test_control_apis_advertised_and_fenced(grete_cluster: GreteCluster) -> None:
    process = grete_cluster.brokers[1]
    versions = _wire.call(process.host, process.port, ApiVersionsRequest(), ApiVersionsResponse, 3)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
    assert ranges[4][1] == 7 and ranges[6][1] == 8 and ranges[5][1] == 4 and ranges[7][1] == 3
    # Kafka 3.9's minimums where Kafka 4 removed v0 (KIP-896): WriteTxnMarkers and the ACL APIs.
    assert [ranges[k][0] for k in (27, 29, 30, 31)] == [0, 0, 0, 0]
    # No metadata quorum to describe: DescribeQuorum is neither advertised nor served (Kafka 3.9's
    # ZooKeeper-mode broker closes the connection on it, as on any API its listener does not serve).
    assert 55 not in ranges
    with pytest.raises((ConnectionError, OSError)):
        _wire.call(process.host, process.port, DescribeQuorumRequest(topics=[]), DescribeQuorumResponse, 2)
    # A LeaderAndIsr from a controller epoch older than the current one: STALE_CONTROLLER_EPOCH.
    stale = _wire.call(process.host, process.port, LeaderAndIsrRequest(controller_id=9, controller_epoch=0,
                                                                       broker_epoch=-1), LeaderAndIsrResponse, 7)
    assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    old_epoch = _wire.call(process.host, process.port, UpdateMetadataRequest(controller_id=9, controller_epoch=99,
                                                                             broker_epoch=1), UpdateMetadataResponse, 8)
    assert old_epoch.error_code == ErrorCode.STALE_BROKER_EPOCH


def test_a_deposed_controller_cannot_write(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """Two controllers never both act: every controller write is a multi that checks
    /controller_epoch's version, so a controller that was elected before the current one (a
    zombie after a long pause) fails its writes with ControllerMoved and changes nothing."""
    current = zk.get("/controller_epoch")[1].version

    async def attempt(fence_version: int) -> None:
        client = ZkClient(grete_cluster.zookeeper.connect, session_timeout_ms=6000, connection_timeout_ms=10000)
        await client.start()
        try:
            zombie = Controller(client, ControllerSettings(99, "PLAINTEXT"))
            zombie.ctx = ControllerContext(epoch=0, epoch_zk_version=fence_version, controller_id=99)
            await zombie.core.fenced([Op("create", "/grete-fence-probe", b"zombie")])
        finally:
            await client.close()
    with pytest.raises(ControllerMoved):
        asyncio.run(attempt(current - 1))
    assert zk.exists("/grete-fence-probe") is None
    asyncio.run(attempt(current))  # the current epoch's version passes the same check
    assert zk.get("/grete-fence-probe")[0] == b"zombie"
    zk.delete("/grete-fence-probe")


def _listed_groups(running: GreteCluster, broker_id: int) -> tuple[int, list[str]]:
    host, port = running.brokers[broker_id].bootstrap_servers.rsplit(":", 1)
    with closing(_wire.Wire(host, int(port), timeout=30.0)) as wire:
        answer = wire.call(ListGroupsRequest(), ListGroupsResponse, 4)
    return answer.error_code, sorted(g.group_id for g in answer.groups)


def test_list_groups_is_answered_by_brokers_leading_no_offsets_partition() -> None:
    """Kafka's group coordinator starts with the broker: ListGroups answers NONE and the groups of
    the partitions it leads (none yet), also before __consumer_offsets exists (kafkajs's tests list
    groups on a fresh cluster) and on a broker that leads none of its partitions."""
    need_zookeeper()
    overrides = {**CLUSTER_OVERRIDES, "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1"}
    with cluster(2, overrides=overrides) as running:
        assert [_listed_groups(running, b) for b in sorted(running.brokers)] == [(0, []), (0, [])]
        create(running, "listed-topic", 1, 1)
        consumer = Consumer({"bootstrap.servers": running.bootstrap_servers, "group.id": "listed",
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["listed-topic"])
            wait_until(lambda: consumer.poll(0.2) is None and bool(consumer.assignment()), 60, "the group formed")
            assert sorted(_listed_groups(running, b) for b in running.brokers) == [(0, []), (0, ["listed"])]
        finally:
            consumer.close()
