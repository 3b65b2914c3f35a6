"""Fetch v0-3 and ListOffsets v0 on a ZooKeeper cluster, on grete and on Apache Kafka 3.9.2: records
written as v2 batches (plain, gzip, headers, a committed transaction) come back down-converted to
the message format the version reads (v0-1: magic 0, v2-3: magic 1 with timestamps), control batches
left out; a zstd batch cannot be converted (UNSUPPORTED_COMPRESSION_TYPE), nor a topic's with
``message.downconversion.enable=false`` (UNSUPPORTED_VERSION). ListOffsets v0 answers
offsets before a time by segment. ApiVersions advertises both from v0. Clients speaking pre-0.11
versions (kafka-python with ``api_version`` (0, 10, 0) and (0, 10, 1)) consume. The admin versions
Kafka 4 removed whose semantics are their successors' answer as Kafka 3.9's: CreateTopics v0-1,
DeleteTopics v0, DescribeConfigs v0 (IsDefault left false, as Kafka 3.9 leaves it), OffsetForLeaderEpoch v0-1,
DescribeLogDirs v0, the delegation-token APIs' v0 (a plaintext listener refuses them alike). OffsetCommit v0 keeps offsets in ZooKeeper, where OffsetFetch v0 reads them;
OffsetCommit v1 stores them as later versions do. Kafka 4 removed these versions (KIP-896), and so
do grete's KRaft brokers and single node."""

from __future__ import annotations

import time
import uuid
from typing import Any

import cluster_helpers as h
import pytest
from cluster_targets import ClusterTarget
from confluent_kafka import Producer

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreateDelegationTokenRequest,
    CreateDelegationTokenResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeDelegationTokenRequest,
    DescribeDelegationTokenResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    ExpireDelegationTokenRequest,
    ExpireDelegationTokenResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    RenewDelegationTokenRequest,
    RenewDelegationTokenResponse,
)
from grete.protocol.records.legacy import decode_message_set
from grete.testing import _wire

# Recent, or the log would roll a segment per batch and delete them by time (a fetch reads one segment).
TIMESTAMP = int(time.time() * 1000) - 60_000


def _leader(target: ClusterTarget, topic: str) -> Any:
    from confluent_kafka.admin import AdminClient
    meta = AdminClient({"bootstrap.servers": target.bootstrap}).list_topics(topic, timeout=10)
    return target.cluster.brokers[meta.topics[topic].partitions[0].leader]


def _topic(target: ClusterTarget, config: dict[str, str] | None = None) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    name = f"old-fetch-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": target.bootstrap})  # kept until the future is done
    admin.create_topics([NewTopic(name, 1, 3, config=config or {})])[name].result(30)
    return name


def _produce(target: ClusterTarget, topic: str, transaction: bool = True) -> None:
    plain = Producer({"bootstrap.servers": target.bootstrap, "linger.ms": 0})
    plain.produce(topic, key=b"k0", value=b"v0", partition=0, timestamp=TIMESTAMP)
    plain.produce(topic, value=b"v1", partition=0, timestamp=TIMESTAMP + 1, headers=[("h", b"dropped")])
    assert plain.flush(30) == 0
    gzip = Producer({"bootstrap.servers": target.bootstrap, "compression.type": "gzip", "linger.ms": 50})
    for i in (2, 3, 4):
        gzip.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, timestamp=TIMESTAMP + i)
    assert gzip.flush(30) == 0
    if not transaction:
        return
    txn = Producer({"bootstrap.servers": target.bootstrap, "transactional.id": f"old-fetch-{uuid.uuid4()}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, value=b"v5", partition=0, timestamp=TIMESTAMP + 5)
    txn.commit_transaction(30)  # a control batch follows: no old consumer sees it


def _fetch(broker: Any, topic: str, version: int) -> FetchResponse.PartitionData:
    request = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    answer = _wire.call(broker.host, broker.port, request, FetchResponse, version, timeout=30)
    return answer.responses[0].partitions[0]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_old_fetch_versions_read_converted_records(cluster_target: ClusterTarget, version: int) -> None:
    topic = _topic(cluster_target)
    _produce(cluster_target, topic)
    leader = _leader(cluster_target, topic)
    data = h.wait_until(lambda: d if (d := _fetch(leader, topic, version)).high_watermark >= 7 else None, 30,
                        "the transaction's marker replicated")
    assert data.error_code == ErrorCode.NONE
    # Kafka 3.9 sizes the answer before converting: a partial message may trail the last whole one.
    records = decode_message_set(bytes(data.records), strict=False)
    magic = 0 if version <= 1 else 1
    assert [(r.offset, r.key, r.value, r.magic) for r in records] == [
        (0, b"k0", b"v0", magic), (1, None, b"v1", magic), (2, b"k2", b"v2", magic), (3, b"k3", b"v3", magic),
        (4, b"k4", b"v4", magic), (5, None, b"v5", magic)]
    assert [r.timestamp for r in records] == ([-1] * 6 if magic == 0 else [TIMESTAMP + i for i in range(6)])


def test_a_zstd_batch_cannot_go_to_an_old_fetch(cluster_target: ClusterTarget) -> None:
    topic = _topic(cluster_target)
    producer = Producer({"bootstrap.servers": cluster_target.bootstrap, "compression.type": "zstd"})
    producer.produce(topic, value=b"z" * 100, partition=0)
    assert producer.flush(30) == 0
    leader = _leader(cluster_target, topic)
    h.wait_until(lambda: _fetch(leader, topic, 4).high_watermark >= 1, 30, "the record replicated")
    data = _fetch(leader, topic, 3)
    assert (data.error_code, data.high_watermark, bytes(data.records or b"")) == (
        ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, -1, b"")


def test_down_conversion_turned_off_refuses_old_fetches(cluster_target: ClusterTarget) -> None:
    """A topic with message.downconversion.enable=false answers Fetch v0-3 UNSUPPORTED_VERSION (Kafka
    3.9's topic config, gone in Kafka 4), whether or not there is anything to convert; v4 reads."""
    topic = _topic(cluster_target, {"message.downconversion.enable": "false"})
    leader = _leader(cluster_target, topic)
    assert _fetch(leader, topic, 3).error_code == ErrorCode.UNSUPPORTED_VERSION  # nothing written yet
    _produce(cluster_target, topic, transaction=False)
    h.wait_until(lambda: _fetch(leader, topic, 4).high_watermark >= 5, 30, "the records replicated")
    for version in (0, 3):
        data = _fetch(leader, topic, version)
        assert (data.error_code, data.high_watermark, bytes(data.records or b"")) == (
            ErrorCode.UNSUPPORTED_VERSION, -1, b"")
    assert _fetch(leader, topic, 4).error_code == ErrorCode.NONE


def test_fetch_and_list_offsets_are_advertised_from_version_0(cluster_target: ClusterTarget) -> None:
    broker = cluster_target.cluster.brokers[cluster_target.broker_ids[0]]
    answer = _wire.call(broker.host, broker.port, ApiVersionsRequest(), ApiVersionsResponse, 0, timeout=30)
    old = (1, 2, 8, 9, 19, 20, 23, 32, 34, 35, 38, 39, 40, 41)  # Fetch, ListOffsets, OffsetCommit/Fetch, ...
    assert [(k.api_key, k.min_version) for k in answer.api_keys if k.api_key in old] == [(key, 0) for key in old]


def _offsets_v0(broker: Any, topic: str, timestamp: int, count: int) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=timestamp, max_num_offsets=count)])])
    return _wire.call(broker.host, broker.port, request, ListOffsetsResponse, 0, timeout=30).topics[0].partitions[0]


def test_list_offsets_v0_answers_offsets_before_a_time(cluster_target: ClusterTarget) -> None:
    topic = _topic(cluster_target)
    _produce(cluster_target, topic, transaction=False)
    leader = _leader(cluster_target, topic)
    h.wait_until(lambda: _fetch(leader, topic, 4).high_watermark >= 5, 30, "the records replicated")
    now_ms = int(time.time() * 1000)
    answers = {(timestamp, count): ((a := _offsets_v0(leader, topic, timestamp, count)).error_code,
                                    list(a.old_style_offsets))
               for timestamp, count in ((-1, 1), (-2, 1), (-1, 10), (now_ms + 3_600_000, 10), (0, 10))}
    assert answers == {(-1, 1): (0, [5]), (-2, 1): (0, [0]), (-1, 10): (0, [5, 0]),
                       (now_ms + 3_600_000, 10): (0, [5, 0]), (0, 10): (0, [])}


@pytest.mark.parametrize("api_version", [(0, 10, 0), (0, 10, 1)], ids=lambda v: ".".join(map(str, v)))
def test_a_pre_0_11_client_consumes(cluster_target: ClusterTarget, api_version: tuple[int, int, int]) -> None:
    from kafka import KafkaConsumer, TopicPartition

    topic = _topic(cluster_target)
    # No transaction: behind a transaction's marker Kafka 3.9 answers such a client a partial message
    # it never gets past ("no complete records were found").
    _produce(cluster_target, topic, transaction=False)
    consumer = KafkaConsumer(bootstrap_servers=cluster_target.bootstrap, api_version=api_version,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        values = [m.value for m in consumer]
    finally:
        consumer.close()
    assert values == [b"v0", b"v1", b"v2", b"v3", b"v4"]


def _controller(target: ClusterTarget) -> Any:
    """A broker to send admin requests to (ZooKeeper mode: any broker writes to ZooKeeper)."""
    return target.cluster.brokers[target.broker_ids[0]]


def test_old_admin_versions(cluster_target: ClusterTarget) -> None:
    broker = _controller(cluster_target)

    def call(request: Any, response: Any, version: int) -> Any:
        return _wire.call(broker.host, broker.port, request, response, version, timeout=30)
    name = f"old-admin-{uuid.uuid4().hex[:8]}"
    create = CreateTopicsRequest(timeout_ms=30000, topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=2, replication_factor=3, assignments=[], configs=[
            CreateTopicsRequest.CreatableTopicConfig(name="retention.ms", value="3600000")])])
    assert [t.error_code for t in call(create, CreateTopicsResponse, 0).topics] == [ErrorCode.NONE]
    assert [t.error_code for t in call(create, CreateTopicsResponse, 1).topics] == [ErrorCode.TOPIC_ALREADY_EXISTS]
    leader = h.wait_until(lambda: _leader(cluster_target, name), 30, "the topic led")

    described = call(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=name, configuration_keys=["retention.ms", "cleanup.policy"])]),
        DescribeConfigsResponse, 0).results[0]
    assert described.error_code == ErrorCode.NONE
    assert sorted((c.name, c.value, c.is_default) for c in described.configs) == [
        ("cleanup.policy", "delete", False), ("retention.ms", "3600000", False)]  # Kafka 3.9 leaves IsDefault false

    epochs = call(OffsetForLeaderEpochRequest(topics=[OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
        topic=name, partitions=[OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, leader_epoch=0)])]),
        OffsetForLeaderEpochResponse, 0).topics[0].partitions[0]
    assert (epochs.error_code, epochs.end_offset) in ((ErrorCode.NONE, 0), (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1))
    leader_epochs = _wire.call(leader.host, leader.port, OffsetForLeaderEpochRequest(topics=[
        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=name, partitions=[
            OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, leader_epoch=0)])]),
        OffsetForLeaderEpochResponse, 1, timeout=30).topics[0].partitions[0]
    assert (leader_epochs.error_code, leader_epochs.leader_epoch, leader_epochs.end_offset) == (ErrorCode.NONE, 0, 0)

    dirs = call(DescribeLogDirsRequest(topics=[DescribeLogDirsRequest.DescribableLogDirTopic(
        topic=name, partitions=[0, 1])]), DescribeLogDirsResponse, 0).results
    assert [(d.error_code, sorted(p.partition_index for t in d.topics for p in t.partitions)) for d in dirs] \
        == [(ErrorCode.NONE, [0, 1])]

    deleted = call(DeleteTopicsRequest(topic_names=[name], timeout_ms=30000), DeleteTopicsResponse, 0)
    assert [(r.name, r.error_code) for r in deleted.responses] == [(name, ErrorCode.NONE)]


def _commit(broker: Any, group: str, topic: str, offsets: dict[int, int], version: int) -> list[int]:
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
        OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                             committed_metadata="m", commit_timestamp=-1)
            for p, o in offsets.items()])])
    answer = _wire.call(broker.host, broker.port, request, OffsetCommitResponse, version, timeout=30)
    return [p.error_code for p in answer.topics[0].partitions]


def _committed(broker: Any, group: str, topic: str, partitions: list[int], version: int) -> list[tuple[int, int]]:
    request = OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)])
    answer = _wire.call(broker.host, broker.port, request, OffsetFetchResponse, version, timeout=30)
    return [(p.error_code, p.committed_offset) for p in answer.topics[0].partitions]


def test_offsets_of_version_0_live_in_zookeeper(cluster_target: ClusterTarget) -> None:
    from kazoo.client import KazooClient

    topic = _topic(cluster_target)
    group = f"old-group-{uuid.uuid4().hex[:8]}"
    broker = _controller(cluster_target)
    assert _commit(broker, group, topic, {0: 42}, 0) == [ErrorCode.NONE]
    assert _commit(broker, group, "no-such-topic", {0: 1}, 0) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    zk = KazooClient(hosts=cluster_target.zk_connect)
    zk.start(timeout=30)
    try:
        assert zk.get(f"/consumers/{group}/offsets/{topic}/0")[0] == b"42"
    finally:
        zk.stop()
        zk.close()
    # v0 reads ZooKeeper, from any broker; nothing kept for partition 1, no partition 7
    other = cluster_target.cluster.brokers[cluster_target.broker_ids[-1]]
    # none kept: UNKNOWN_TOPIC_OR_PARTITION with offset -1, as Kafka 3.9 answers (its UNKNOWN_PARTITION)
    assert _committed(other, group, topic, [0, 1, 7], 0) == [
        (ErrorCode.NONE, 42), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1), (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
    assert _commit(broker, group, topic, {0: 43}, 0) == [ErrorCode.NONE]  # set again
    assert _committed(other, group, topic, [0], 0) == [(ErrorCode.NONE, 43)]


def test_offset_commit_v1_goes_to_the_group_coordinator(cluster_target: ClusterTarget) -> None:
    topic = _topic(cluster_target)
    group = f"v1-group-{uuid.uuid4().hex[:8]}"
    broker = _controller(cluster_target)

    def coordinator_id() -> int | None:
        found = _wire.call(broker.host, broker.port, FindCoordinatorRequest(key=group, key_type=0),
                           FindCoordinatorResponse, 3, timeout=30)
        return found.node_id if found.error_code == ErrorCode.NONE else None
    coordinator = cluster_target.cluster.brokers[h.wait_until(coordinator_id, 60, "the group's coordinator")]
    assert h.wait_until(lambda: (e := _commit(coordinator, group, topic, {0: 7}, 1)) == [0] and e, 30,
                        "the commit taken") == [ErrorCode.NONE]
    assert _committed(coordinator, group, topic, [0], 1) == [(ErrorCode.NONE, 7)]
    assert _committed(coordinator, group, topic, [0], 0) == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]  # not in ZooKeeper


def test_delegation_token_v0_is_answered_as_v1(cluster_target: ClusterTarget) -> None:
    """Version 0 of the four delegation-token APIs is version 1 answered without throttling first
    (KIP-219); on a plaintext listener both refuse the request with the same error."""
    broker = _controller(cluster_target)
    hmac = b"\x01" * 32
    calls = [(CreateDelegationTokenRequest(renewers=[], max_lifetime_ms=-1), CreateDelegationTokenResponse),
             (RenewDelegationTokenRequest(hmac=hmac, renew_period_ms=-1), RenewDelegationTokenResponse),
             (ExpireDelegationTokenRequest(hmac=hmac, expiry_time_period_ms=-1), ExpireDelegationTokenResponse),
             (DescribeDelegationTokenRequest(owners=None), DescribeDelegationTokenResponse)]
    for request, response in calls:
        codes = [_wire.call(broker.host, broker.port, request, response, version, timeout=30).error_code
                 for version in (0, 1)]
        assert codes == [ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED] * 2, (type(request).__name__, codes)
