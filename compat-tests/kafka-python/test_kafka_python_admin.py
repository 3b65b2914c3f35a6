"""kafka-python KafkaAdminClient: topics, partitions and configs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from kafka import KafkaAdminClient
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
from kafka.errors import InvalidConfigurationError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from kafka_python_helpers import unique

pytestmark = pytest.mark.compat


@pytest.fixture
def admin(broker) -> Iterator[KafkaAdminClient]:
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield a
    a.close()


def modified_configs(admin: KafkaAdminClient, topic: str) -> dict[str, str]:
    """The topic's non-default keys (kafka-python's default describe filter)."""
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    return {k: v["value"] for k, v in res["topic"][topic].items()}


def eventually_modified(admin: KafkaAdminClient, topic: str, expected: dict[str, str]) -> None:
    """Kafka (KRaft) applies config changes asynchronously: poll until they show."""
    deadline = time.monotonic() + 10
    while (got := modified_configs(admin, topic)) != expected:
        assert time.monotonic() < deadline, f"{got} != {expected}"
        time.sleep(0.1)


def test_create_describe_delete_topic(admin: KafkaAdminClient) -> None:
    name = unique("kp-admin")
    created = admin.create_topics({name: {"num_partitions": 3, "replication_factor": 1,
                                          "configs": {"retention.ms": "3600000"}}})
    (result,) = created["topics"]
    assert (result["name"], result["error_code"], result["num_partitions"]) == (name, 0, 3)
    (desc,) = admin.describe_topics([name])
    assert desc["error_code"] == 0
    assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2]
    assert all(p["leader_id"] >= 0 and len(p["replica_nodes"]) == 1 for p in desc["partitions"])
    assert name in admin.list_topics()
    assert modified_configs(admin, name) == {"retention.ms": "3600000"}
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({name: {"num_partitions": 1, "replication_factor": 1}})
    admin.delete_topics([name])
    deadline = time.monotonic() + 20
    while name in admin.list_topics():
        assert time.monotonic() < deadline, "topic still listed after delete"
        time.sleep(0.1)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([name])


def test_invalid_config_refused(admin: KafkaAdminClient) -> None:
    name = unique("kp-admin")
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics({name: {"num_partitions": 1, "replication_factor": 1,
                                    "configs": {"cleanup.policy": "shred"}}})
    assert name not in admin.list_topics()


def test_create_partitions(admin: KafkaAdminClient, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    admin.create_partitions({topic: 4})
    deadline = time.monotonic() + 20
    while True:
        (desc,) = admin.describe_topics([topic])
        if len(desc["partitions"]) == 4:
            break
        assert time.monotonic() < deadline, "new partitions not visible"
        time.sleep(0.1)


def test_alter_and_reset_configs(admin: KafkaAdminClient, make_topic: Callable[..., str]) -> None:
    topic = make_topic(config={"retention.ms": "100000"})
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                        {"segment.bytes": (AlterConfigOp.SET, "1048576")})])
    eventually_modified(admin, topic, {"retention.ms": "100000", "segment.bytes": "1048576"})
    admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, topic, ["retention.ms"])])
    eventually_modified(admin, topic, {"segment.bytes": "1048576"})
    # The full listing has defaults too, marked as such.
    res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
    entries = res["topic"][topic]
    assert entries["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    assert entries["segment.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
