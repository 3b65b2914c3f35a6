"""Answers at the edges of requests clients send every day, the same raw requests against grete and
Apache Kafka 4.3.1: the operations reported for a group and an unknown topic, what a validate-only
CreateTopics resolves, an empty coordinator key, an unknown or empty transactional id, and a special
ListOffsets timestamp older than the request's version. (Found by comparing sarama's requests
against both brokers, request by request.)"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
)
from grete.testing._wire import Wire  # noqa: E402

# Without an authorizer every operation of the resource type (bit per AclOperation): a topic's READ
# .. ALTER_CONFIGS; a group's READ, DESCRIBE, DELETE and, since groups have configs, DESCRIBE_CONFIGS
# and ALTER_CONFIGS (Kafka 3.9's groups had 328, without the two).
ALL_TOPIC_OPERATIONS, ALL_GROUP_OPERATIONS = 3576, 3400
GROUP, TRANSACTION = 0, 1
BROKER_RESOURCE = 4
# A coordinator whose partition is still being created or loaded.
LOADING = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE)

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="Kafka 4.3's answers (3.9's groups have no configs)")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def find_coordinator(wire: Wire, key: str, key_type: int) -> FindCoordinatorResponse:
    return wire.call(FindCoordinatorRequest(key=key, key_type=key_type), FindCoordinatorResponse, 3)


def test_a_group_reports_every_group_operation(wire):
    """v5: a group that does not exist is Dead, with every operation; v6 (KIP-1043): GROUP_ID_NOT_FOUND,
    and an answer with an error carries no operations."""
    group = unique("no-such-group")
    deadline = time.monotonic() + 30

    def described(version: int) -> tuple[int, str, int]:
        request = DescribeGroupsRequest(groups=[group], include_authorized_operations=True)
        (answer,) = wire.call(request, DescribeGroupsResponse, version).groups
        return answer.error_code, answer.group_state, answer.authorized_operations

    while described(5)[0] in LOADING:
        assert time.monotonic() < deadline, "no group coordinator"
        find_coordinator(wire, group, GROUP)  # creates the offsets topic
        time.sleep(0.2)
    assert described(5) == (ErrorCode.NONE, "Dead", ALL_GROUP_OPERATIONS)
    assert described(6) == (ErrorCode.GROUP_ID_NOT_FOUND, "Dead", -2147483648)


def test_an_unknown_topic_reports_every_topic_operation(wire):
    name = unique("no-such-topic")
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                              allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    (topic,) = wire.call(request, MetadataResponse, 11).topics
    assert (topic.error_code, topic.name, topic.topic_authorized_operations) == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name, ALL_TOPIC_OPERATIONS)


def test_a_validate_only_create_answers_the_default_replication_factor(wire):
    node = wire.call(MetadataRequest(topics=[]), MetadataResponse, 12).brokers[0].node_id
    configs = wire.call(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=BROKER_RESOURCE, resource_name=str(node), configuration_keys=["default.replication.factor",
                                                                                    "num.partitions"])]),
        DescribeConfigsResponse, 4).results[0].configs
    default = {c.name: int(c.value) for c in configs}
    request = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=unique("dry"), num_partitions=-1, replication_factor=-1, assignments=[], configs=[])],
        timeout_ms=30000, validate_only=True)
    (result,) = wire.call(request, CreateTopicsResponse, 7).topics
    assert (result.error_code, result.num_partitions, result.replication_factor) == (
        0, default["num.partitions"], default["default.replication.factor"])


def test_an_empty_coordinator_key_finds_a_coordinator(wire):
    for key_type in (GROUP, TRANSACTION):
        deadline = time.monotonic() + 30
        answer = find_coordinator(wire, "", key_type)
        while answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and time.monotonic() < deadline:
            time.sleep(0.2)  # the internal topic is being created
            answer = find_coordinator(wire, "", key_type)
        assert (answer.error_code, answer.node_id >= 0) == (ErrorCode.NONE, True), answer


def test_an_unknown_or_empty_transactional_id_is_described_with_defaults(wire):
    name = unique("no-such-txn")
    deadline = time.monotonic() + 30
    while find_coordinator(wire, name, TRANSACTION).error_code != ErrorCode.NONE:
        assert time.monotonic() < deadline, "no transaction coordinator"
        time.sleep(0.2)

    def described() -> list[tuple[str, int, str, int, int, int]]:
        answer = wire.call(DescribeTransactionsRequest(transactional_ids=[name, ""]), DescribeTransactionsResponse, 0)
        return [(s.transactional_id, s.error_code, s.transaction_state, s.transaction_start_time_ms,
                 s.producer_id, s.producer_epoch) for s in answer.transaction_states]

    states = described()
    while any(s[1] in LOADING for s in states) and time.monotonic() < deadline:  # the coordinator loads
        time.sleep(0.2)
        states = described()
    assert states == [(name, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, "", 0, 0, 0),
                      ("", ErrorCode.INVALID_REQUEST, "", 0, 0, 0)]


def test_a_special_timestamp_newer_than_the_version_is_refused_first(wire):
    """-3 (the max timestamp) needs v7: at v6 UNSUPPORTED_VERSION, before the partition is looked
    up, so even for a topic that does not exist."""
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=unique("no-such-topic"), partitions=[ListOffsetsRequest.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-3)])])
    (partition,) = wire.call(request, ListOffsetsResponse, 6).topics[0].partitions
    assert (partition.error_code, partition.offset, partition.timestamp) == (ErrorCode.UNSUPPORTED_VERSION, -1, -1)


def test_a_finished_transaction_keeps_its_start_time(broker, wire, make_topic):
    """DescribeTransactions after a commit: CompleteCommit with the transaction's start time still
    given (Kafka's coordinator keeps txnStartTimestamp until the next transaction starts)."""
    from confluent_kafka import Producer

    topic = make_topic()
    txn_id = unique("finished-txn")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    before_ms = int(time.time() * 1000)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    producer.commit_transaction(30)

    def state() -> DescribeTransactionsResponse.TransactionState:
        return wire.call(DescribeTransactionsRequest(transactional_ids=[txn_id]), DescribeTransactionsResponse,
                         0).transaction_states[0]
    deadline = time.monotonic() + 30
    described = state()
    while described.transaction_state != "CompleteCommit" and time.monotonic() < deadline:
        time.sleep(0.1)  # the markers are being written
        described = state()
    assert described.transaction_state == "CompleteCommit"
    assert before_ms - 5000 <= described.transaction_start_time_ms <= int(time.time() * 1000)
