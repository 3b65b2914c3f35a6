"""Kafka 4's admin APIs on the wire: DescribeTopicPartitions (75) with its cursor, ListConfigResources
(74), DescribeLogDirs v5 with cordoned dirs, DescribeCluster v2 and FindCoordinator v5. The same raw
requests against Kafka 4.3.1 and grete; Kafka's answers required of grete."""

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
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from grete.testing._wire import Wire  # noqa: E402

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="Kafka 4 APIs")

DTP = DescribeTopicPartitionsRequest
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
ALL_TOPIC_OPERATIONS = 3576  # READ .. ALTER_CONFIGS without an authorizer
NO_OPERATIONS = -2147483648


@pytest.fixture
def topics(make_topic):
    """Three topics named in a known order: -a with 3 partitions, -b with 1, -c with 2."""
    prefix = "dtp-" + uuid.uuid4().hex[:8]
    a, b, c = (make_topic(partitions=n, prefix=f"{prefix}-{s}") for s, n in (("a", 3), ("b", 1), ("c", 2)))
    assert a < b < c
    return a, b, c


def describe(wire: Wire, names: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None
             ) -> tuple[list[tuple[int, str | None, list[int]]], tuple[str, int] | None]:
    request = DTP(topics=[DTP.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                  cursor=DTP.Cursor(topic_name=cursor[0], partition_index=cursor[1]) if cursor else None)
    response = wire.call(request, DescribeTopicPartitionsResponse, 0)
    nxt = response.next_cursor
    return ([(t.error_code, t.name, [p.partition_index for p in t.partitions]) for t in response.topics],
            (nxt.topic_name, nxt.partition_index) if nxt is not None else None)


def test_describe_topic_partitions_whole(wire, topics):
    a, b, c = topics
    response = wire.call(DTP(topics=[DTP.TopicRequest(name=n) for n in (c, a, b, a)]),
                         DescribeTopicPartitionsResponse, 0)
    assert [t.name for t in response.topics] == [a, b, c]  # name order, each once
    assert response.next_cursor is None
    first = response.topics[0]
    assert first.error_code == 0 and first.topic_id.int != 0 and not first.is_internal
    assert first.topic_authorized_operations == ALL_TOPIC_OPERATIONS
    part = first.partitions[0]
    assert part.leader_id >= 0 and part.leader_epoch >= 0 and part.isr_nodes == part.replica_nodes
    assert part.replica_nodes[0] == part.leader_id  # one replica on a single node; a cluster's topics here have one per broker
    assert part.eligible_leader_replicas == [] and part.last_known_elr == [] and part.offline_replicas == []


@pytest.mark.parametrize(("limit", "cursor", "expected", "next_cursor"), [
    (2, None, [("a", [0, 1])], ("a", 2)),
    (2, ("a", 2), [("a", [2]), ("b", [0])], ("c", 0)),
    (1, ("b", 0), [("b", [0])], ("c", 0)),
    (1, ("b", 1), [("b", []), ("c", [0])], ("c", 1)),
    (10, ("a", 7), [("a", []), ("b", [0]), ("c", [0, 1])], None),
    (0, None, [("a", [0])], ("a", 1)),  # the limit is at least 1
    (-1, None, [("a", [0])], ("a", 1)),
])
def test_describe_topic_partitions_pages(wire, topics, limit, cursor, expected, next_cursor):
    names = dict(zip("abc", topics, strict=True))
    got, nxt = describe(wire, list(topics), limit, (names[cursor[0]], cursor[1]) if cursor else None)
    assert got == [(0, names[k], parts) for k, parts in expected]
    assert nxt == ((names[next_cursor[0]], next_cursor[1]) if next_cursor else None)


def test_describe_topic_partitions_errors(wire, topics):
    a, b, _ = topics
    missing_first, missing_last = "aaa-missing-" + a, "zzz-missing-" + a
    # Unknown and illegal names take no room in the page; a cursor can point past the last one.
    got, nxt = describe(wire, [missing_last, "bad name!", b, missing_first], limit=1)
    assert got == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, missing_first, []),
                   (ErrorCode.INVALID_TOPIC_EXCEPTION, "bad name!", []), (0, b, [0])]
    assert nxt == (missing_last, 0)
    # A cursor outside the requested topics: every topic INVALID_REQUEST.
    got, nxt = describe(wire, [a, b], cursor=("zzz-elsewhere", 0))
    assert got == [(ErrorCode.INVALID_REQUEST, a, []), (ErrorCode.INVALID_REQUEST, b, [])] and nxt is None
    # An empty name fails the request: every topic UNKNOWN_SERVER_ERROR, in request order.
    response = wire.call(DTP(topics=[DTP.TopicRequest(name=n) for n in (b, "", a)]),
                         DescribeTopicPartitionsResponse, 0)
    assert [(t.error_code, t.name, t.topic_authorized_operations) for t in response.topics] == [
        (ErrorCode.UNKNOWN_SERVER_ERROR, n, NO_OPERATIONS) for n in (b, "", a)]


def test_describe_topic_partitions_all_topics(wire, topics):
    a, b, c = topics
    got, nxt = describe(wire, [], limit=2000, cursor=(a, 1))
    assert got[:3] == [(0, a, [1, 2]), (0, b, [0]), (0, c, [0, 1])]  # from the cursor on, in name order
    assert all(name is not None and name >= a for _, name, _ in got) and nxt is None


KAFKA_TYPE_ORDER = [GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC]


def list_config_resources(wire: Wire, types: list[int], version: int = 1) -> tuple[int, set[tuple[int, str]]]:
    response = wire.call(ListConfigResourcesRequest(resource_types=types), ListConfigResourcesResponse, version)
    order = [KAFKA_TYPE_ORDER.index(r.resource_type) for r in response.config_resources]
    assert order == sorted(order), "types in Kafka's order"
    return response.error_code, {(r.resource_type, r.resource_name) for r in response.config_resources}


def test_list_config_resources(wire, topics):
    brokers = {str(b.broker_id) for b in wire.call(DescribeClusterRequest(), DescribeClusterResponse, 0).brokers}
    group = "lcr-" + uuid.uuid4().hex[:8]
    IAC = IncrementalAlterConfigsRequest
    resource = IAC.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
        IAC.AlterableConfig(name="consumer.session.timeout.ms", config_operation=0, value="50000")])
    assert wire.call(IAC(resources=[resource]), IncrementalAlterConfigsResponse, 1).responses[0].error_code == 0

    code, everything = list_config_resources(wire, [])
    assert code == 0
    assert {(TOPIC, t) for t in topics} | {(BROKER, b) for b in brokers} | {(BROKER_LOGGER, b) for b in brokers} | \
        {(GROUP, group)} <= everything
    assert {t for t, _ in everything} <= {TOPIC, BROKER, BROKER_LOGGER, GROUP, CLIENT_METRICS}
    assert list_config_resources(wire, [TOPIC, GROUP, BROKER])[0] == 0  # answered in Kafka's order
    code, only_topics = list_config_resources(wire, [TOPIC, TOPIC])
    assert code == 0 and only_topics == {r for r in everything if r[0] == TOPIC}
    assert list_config_resources(wire, [BROKER]) == (0, {(BROKER, b) for b in brokers})  # every live broker
    assert list_config_resources(wire, [BROKER_LOGGER]) == (0, {(BROKER_LOGGER, b) for b in brokers})
    # Client-metrics subscriptions (test_wire_client_metrics.py) are whatever other tests left.
    code, subscriptions = list_config_resources(wire, [CLIENT_METRICS])
    assert code == 0 and subscriptions == {r for r in everything if r[0] == CLIENT_METRICS}
    assert (GROUP, group) in list_config_resources(wire, [GROUP])[1]
    assert list_config_resources(wire, [], version=0) == (0, subscriptions)  # v0: client-metrics resources only
    for bad in ([99], [0], [1], [TOPIC, 99]):
        assert list_config_resources(wire, bad) == (ErrorCode.UNSUPPORTED_VERSION, set())


def test_describe_log_dirs_cordoned(wire, broker):
    """Every broker's log dirs cordoned (on a cluster, each broker's), no topic can be placed."""
    broker_ids = [str(b.broker_id) for b in wire.call(DescribeClusterRequest(), DescribeClusterResponse, 0).brokers]
    nodes = [Wire(host, int(port), timeout=30) for host, port in
             (address.rsplit(":", 1) for address in broker.bootstrap.split(","))]  # each broker's own dirs
    dirs = wire.call(DescribeLogDirsRequest(topics=[]), DescribeLogDirsResponse, 5).results
    assert dirs and not any(d.is_cordoned for d in dirs)
    log_dir = dirs[0].log_dir
    IAC = IncrementalAlterConfigsRequest

    def cordon(value: str | None) -> tuple[int, str | None]:
        resources = [IAC.AlterConfigsResource(resource_type=BROKER, resource_name=broker_id, configs=[
            IAC.AlterableConfig(name="cordoned.log.dirs", config_operation=0 if value is not None else 1,
                                value=value)]) for broker_id in broker_ids]
        answers = {(r.error_code, r.error_message)
                   for r in wire.call(IAC(resources=resources), IncrementalAlterConfigsResponse, 1).responses}
        assert len(answers) == 1, answers
        return answers.pop()

    def cordoned_everywhere(wanted: bool) -> None:
        deadline = time.monotonic() + 30  # Kafka's broker applies the controller's record a moment later
        while any(n.call(DescribeLogDirsRequest(topics=[]), DescribeLogDirsResponse, 5).results[0].is_cordoned
                  != wanted for n in nodes):
            assert time.monotonic() < deadline
            time.sleep(0.1)

    def create(name: str, validate_only: bool = False) -> CreateTopicsResponse.CreatableTopicResult:
        return wire.call(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name=name, num_partitions=1, replication_factor=-1)], timeout_ms=10_000, validate_only=validate_only),
            CreateTopicsResponse, 5).topics[0]

    assert cordon("/nonexistent") == (ErrorCode.INVALID_REQUEST, "requirement failed: All entries in "
                                      "cordoned.log.dirs must be present in log.dirs or log.dir. Missing "
                                      "entries : /nonexistent")
    assert cordon("*") == (0, None)
    try:
        cordoned_everywhere(True)
        name = "cordoned-" + uuid.uuid4().hex[:8]
        deadline = time.monotonic() + 30  # on a cluster, until every broker's heartbeat has told the controller
        while len(nodes) > 1 and create(name, validate_only=True).error_code == 0:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        created = create(name)
        assert (created.error_code, created.error_message) == (
            ErrorCode.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 1 time(s): All brokers "
            "are currently fenced, or have all their log directories cordoned.")
        v4 = wire.call(DescribeLogDirsRequest(topics=[]), DescribeLogDirsResponse, 4).results[0]
        assert v4.log_dir == log_dir and not v4.is_cordoned  # not in v4
    finally:
        assert cordon(None) == (0, None)
        cordoned_everywhere(False)  # later tests create topics: wait until every broker applied it
        deadline = time.monotonic() + 30
        while len(nodes) > 1 and create("uncordoned-" + uuid.uuid4().hex[:8], validate_only=True).error_code:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for n in nodes:
            n.close()


def test_describe_cluster_v2(wire):
    response = wire.call(DescribeClusterRequest(include_fenced_brokers=True), DescribeClusterResponse, 2)
    assert response.error_code == 0 and response.brokers
    assert not any(b.is_fenced for b in response.brokers)


def test_find_coordinator_v5(wire):
    versions = {k.api_key: k.max_version for k in wire.call(
        ApiVersionsRequest(client_software_name="t", client_software_version="1"), ApiVersionsResponse, 3).api_keys}
    assert versions[10] >= 5
    # Key type SHARE (2) needs v6: INVALID_REQUEST below it.
    (share,) = wire.call(FindCoordinatorRequest(key_type=2, coordinator_keys=["g:AAAAAAAAAAAAAAAAAAAAAA:0"]),
                         FindCoordinatorResponse, 5).coordinators
    assert (share.error_code, share.node_id) == (ErrorCode.INVALID_REQUEST, -1)
    deadline = time.monotonic() + 30
    while True:  # the offsets topic is created on the first lookup
        (group,) = wire.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["fc5-group"]),
                             FindCoordinatorResponse, 5).coordinators
        if group.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert group.error_code == 0 and group.node_id >= 0 and group.port > 0


def test_elect_leaders_answers_each_partition_with_the_controllers_message(wire, make_topic):
    """A KRaft controller's answers (Kafka 4.3.1's ReplicationControlManager): a partition led by its
    preferred replica needs no election, an unknown topic or partition is named in the message."""
    topic = make_topic(partitions=1)
    missing = "missing-" + uuid.uuid4().hex[:8]
    request = ElectLeadersRequest(election_type=0, timeout_ms=30000, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0, 5]),
        ElectLeadersRequest.TopicPartitions(topic=missing, partitions=[0])])
    answer = wire.call(request, ElectLeadersResponse, 2)
    assert answer.error_code == 0
    assert {(r.topic, p.partition_id): (p.error_code, p.error_message)
            for r in answer.replica_election_results for p in r.partition_result} == {
        (topic, 0): (ErrorCode.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
        (topic, 5): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic}-5"),
        (missing, 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {missing}"),
    }


def test_messages_of_successful_admin_answers(wire):
    """Null or empty, as Kafka 4.3.1 fills them: DescribeClientQuotas leaves the field's default,
    the controller's ListPartitionReassignments sets null, and its CreatePartitions of an unknown
    topic gives no message."""
    quotas = wire.call(DescribeClientQuotasRequest(components=[], strict=False), DescribeClientQuotasResponse, 1)
    assert (quotas.error_code, quotas.error_message) == (0, "")
    listed = wire.call(ListPartitionReassignmentsRequest(timeout_ms=30000, topics=None),
                       ListPartitionReassignmentsResponse, 0)
    assert (listed.error_code, listed.error_message) == (0, None)
    missing = "missing-" + uuid.uuid4().hex[:8]
    grown = wire.call(CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
        name=missing, count=2, assignments=None)], timeout_ms=30000, validate_only=False), CreatePartitionsResponse, 3)
    assert [(r.name, r.error_code, r.error_message) for r in grown.results] == [
        (missing, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)]


@pytest.mark.parametrize(("name", "reason"), [
    ("", "the empty string is not allowed"),
    (".", "'.' is not allowed"),
    ("..", "'..' is not allowed"),
    ("a" * 250, f"the length of '{'a' * 250}' is longer than the max allowed length 249"),
    ("bad name!", "'bad name!' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
])
def test_create_topics_names_why_a_name_is_invalid(wire, name, reason):
    """Kafka's Topic.validate wording, which clients' suites match (rdkafka-ruby's, Strimzi's)."""
    request = CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
        timeout_ms=10000, validate_only=True)
    (answer,) = wire.call(request, CreateTopicsResponse, 7).topics
    assert (answer.error_code, answer.error_message) == (ErrorCode.INVALID_TOPIC_EXCEPTION,
                                                         f"Topic name is invalid: {reason}")


@pytest.mark.parametrize("level", ["LOUD", "OFF", "info"])
def test_a_broker_logger_takes_kafkas_level_names_only(wire, broker, level):
    """IncrementalAlterConfigs on the root broker logger: a level outside Kafka's six names, by exact
    spelling, is INVALID_CONFIG with Kafka's list of them."""
    node_id = wire.call(DescribeClusterRequest(), DescribeClusterResponse, 0).brokers[0].broker_id
    request = IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=BROKER_LOGGER, resource_name=str(node_id), configs=[
            IncrementalAlterConfigsRequest.AlterableConfig(name="root", config_operation=0, value=level)])],
        validate_only=False)
    (answer,) = wire.call(request, IncrementalAlterConfigsResponse, 1).responses
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.INVALID_CONFIG, f"Cannot set the log level of root to {level} as it is not a supported log "
        "level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN")
