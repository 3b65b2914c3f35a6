"""Group configs (ConfigResource GROUP) in a grete cluster: kept in ZooKeeper under
``/config/groups/<group>`` with a ``/config/changes`` notification, so a config set through one broker
applies on every broker: the group's coordinator and its share partitions' leaders may be any of them."""

from __future__ import annotations

import functools
import json
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import closing

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
)
from grete.testing.cluster import GreteCluster, cluster
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until
from tests.cluster.test_cluster_share import acquire, join, leader_of, wire_to

GROUP, GROUP_CONFIG = 32, 8  # ConfigResource.Type, ConfigSource
SET, DELETE = 0, 1

pytestmark = pytest.mark.slow  # a cluster of its own, about 30 s


@pytest.fixture(scope="module")
def grete_cluster() -> Iterator[GreteCluster]:
    need_zookeeper()
    with cluster(3, overrides={**CLUSTER_OVERRIDES, "share.coordinator.state.topic.num.partitions": "3"}) as running:
        yield running


def incremental(grete_cluster: GreteCluster, broker: int, group: str,
                ops: list[tuple[str, int, str | None]]) -> tuple[int, str | None]:
    IAC = IncrementalAlterConfigsRequest
    with closing(wire_to(grete_cluster, broker)) as w:
        (r,) = w.call(IAC(resources=[IAC.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
            IAC.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops])]),
            IncrementalAlterConfigsResponse, 1).responses
    return r.error_code, r.error_message


def legacy_alter(grete_cluster: GreteCluster, broker: int, group: str, configs: dict[str, str]) -> tuple[int, str | None]:
    A = AlterConfigsRequest
    with closing(wire_to(grete_cluster, broker)) as w:
        (r,) = w.call(A(resources=[A.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
            A.AlterableConfig(name=k, value=v) for k, v in configs.items()])]), AlterConfigsResponse, 2).responses
    return r.error_code, r.error_message


def overrides(grete_cluster: GreteCluster, broker: int, group: str) -> dict[str, str | None]:
    """The group's configs that DescribeConfigs, at ``broker``, reports as the group's own."""
    R = DescribeConfigsRequest.DescribeConfigsResource
    with closing(wire_to(grete_cluster, broker)) as w:
        (r,) = w.call(DescribeConfigsRequest(resources=[R(resource_type=GROUP, resource_name=group,
                                                          configuration_keys=None)]),
                      DescribeConfigsResponse, 4).results
    assert r.error_code == 0, r.error_message
    return {c.name: c.value for c in r.configs if c.config_source == GROUP_CONFIG}


def listed_groups(grete_cluster: GreteCluster, broker: int) -> set[str]:
    with closing(wire_to(grete_cluster, broker)) as w:
        r = w.call(ListConfigResourcesRequest(resource_types=[GROUP]), ListConfigResourcesResponse, 1)
    assert r.error_code == 0
    return {c.resource_name for c in r.config_resources}


def await_everywhere(grete_cluster: GreteCluster, group: str, expected: dict[str, str | None]) -> None:
    for broker in sorted(grete_cluster.brokers):
        wait_until(functools.partial(described_as, grete_cluster, broker, group, expected), 30,
                   f"broker {broker} to describe {expected}")


def described_as(grete_cluster: GreteCluster, broker: int, group: str, expected: dict[str, str | None]) -> bool:
    return overrides(grete_cluster, broker, group) == expected


def group_coordinator(grete_cluster: GreteCluster, group: str) -> int | None:
    with closing(wire_to(grete_cluster, min(grete_cluster.brokers))) as w:
        (c,) = w.call(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), FindCoordinatorResponse,
                      4).coordinators
    return int(c.node_id) if c.error_code == 0 else None


def test_share_auto_offset_reset_set_through_another_broker(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """share.auto.offset.reset=earliest set through a broker that is neither the group's coordinator
    nor the partition's leader: described through the others, and the share partition, initialized
    at the leader, starts at the log's start (latest, the default, would deliver none of these)."""
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": grete_cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": grete_cluster.bootstrap_servers, "acks": "all"})
    for i in range(3):
        producer.produce(topic, f"r{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    leader = leader_of(zk, topic, 0)
    group = f"sg-{uuid.uuid4().hex[:8]}"
    coordinator = wait_until(lambda: group_coordinator(grete_cluster, group), 30, "a group coordinator")
    altered_at = next(b for b in sorted(grete_cluster.brokers) if b not in (leader, coordinator))

    assert incremental(grete_cluster, altered_at, group, [("share.auto.offset.reset", SET, "earliest")]) == (0, None)
    await_everywhere(grete_cluster, group, {"share.auto.offset.reset": "earliest"})

    member, topic_id = join(grete_cluster, sorted(grete_cluster.brokers), group, topic)
    with closing(wire_to(grete_cluster, leader)) as w:
        def acquired() -> list[tuple[int, int, int]]:
            code, got = acquire(w, group, member, topic_id, 0)
            assert code in (0, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), \
                ErrorCode(code).name
            return got

        found = wait_until(acquired, 20, "records from the share partition")
    assert sorted(o for first, last, _ in found for o in range(first, last + 1)) == [0, 1, 2]


def test_group_configs_in_zookeeper(grete_cluster: GreteCluster, zk: KazooClient) -> None:
    """Validated as on one node; stored as Kafka's other entity configs are, the group id sanitized
    (a slash cannot be in a znode name); AlterConfigs replaces the whole set, an empty set lists the
    group no more."""
    first, second, third = sorted(grete_cluster.brokers)
    group = f"g/{uuid.uuid4().hex[:8]} x"
    assert incremental(grete_cluster, first, group, [("nope", SET, "1")]) == (
        ErrorCode.INVALID_CONFIG, "Unknown group config name: nope")
    assert incremental(grete_cluster, first, group, [("consumer.session.timeout.ms", SET, "1")]) == (
        ErrorCode.INVALID_CONFIG, "consumer.session.timeout.ms must be greater than or equal to "
                                  "group.consumer.min.session.timeout.ms")
    assert incremental(grete_cluster, first, "", [("consumer.session.timeout.ms", SET, "50000")]) == (
        ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
    assert legacy_alter(grete_cluster, first, "", {}) == (
        ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")

    assert incremental(grete_cluster, first, group, [("consumer.session.timeout.ms", SET, "50000"),
                                                     ("share.record.lock.duration.ms", SET, "20000")]) == (0, None)
    entity = urllib.parse.quote(group, safe="")
    assert json.loads(zk.get(f"/config/groups/{entity}")[0]) == {"version": 1, "config": {
        "consumer.session.timeout.ms": "50000", "share.record.lock.duration.ms": "20000"}}
    notices = [json.loads(zk.get(f"/config/changes/{c}")[0]) for c in zk.get_children("/config/changes")]
    assert {"version": 2, "entity_path": f"groups/{entity}"} in notices
    await_everywhere(grete_cluster, group, {"consumer.session.timeout.ms": "50000",
                                            "share.record.lock.duration.ms": "20000"})
    assert group in listed_groups(grete_cluster, third)

    assert incremental(grete_cluster, second, group, [("consumer.session.timeout.ms", DELETE, None)]) == (0, None)
    await_everywhere(grete_cluster, group, {"share.record.lock.duration.ms": "20000"})
    assert legacy_alter(grete_cluster, third, group, {"share.isolation.level": "read_uncommitted "}) == (
        ErrorCode.INVALID_CONFIG, "Invalid value read_uncommitted  for configuration share.isolation.level: "
                                  "String must be one of: read_committed, read_uncommitted")
    assert legacy_alter(grete_cluster, third, group, {"share.isolation.level": "read_committed"}) == (0, None)
    await_everywhere(grete_cluster, group, {"share.isolation.level": "read_committed"})
    assert legacy_alter(grete_cluster, second, group, {}) == (0, None)
    await_everywhere(grete_cluster, group, {})
    assert group not in listed_groups(grete_cluster, first)


def test_a_restarted_broker_reads_group_configs_from_zookeeper(grete_cluster: GreteCluster) -> None:
    first, *_, last = sorted(grete_cluster.brokers)
    group = f"g-{uuid.uuid4().hex[:8]}"
    assert incremental(grete_cluster, first, group, [("share.auto.offset.reset", SET, "earliest")]) == (0, None)
    await_everywhere(grete_cluster, group, {"share.auto.offset.reset": "earliest"})
    grete_cluster.stop_broker(last)
    grete_cluster.start_broker(last)
    assert overrides(grete_cluster, last, group) == {"share.auto.offset.reset": "earliest"}
    assert group in listed_groups(grete_cluster, last)
