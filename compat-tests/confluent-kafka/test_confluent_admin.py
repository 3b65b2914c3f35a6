"""confluent-kafka AdminClient: topics, partitions and configs."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_helpers import group_name
from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

pytestmark = pytest.mark.compat


@pytest.fixture
def admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def topic_config(admin: AdminClient, topic: str) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=10)
    return {k: v.value for k, v in entries.items()}


def eventually_config(admin: AdminClient, topic: str, key: str, value: str, timeout: float = 10.0) -> dict[str, str]:
    """Kafka (KRaft) applies config changes asynchronously: poll until ``key`` shows ``value``."""
    deadline = time.monotonic() + timeout
    while (config := topic_config(admin, topic)).get(key) != value:
        assert time.monotonic() < deadline, f"{key}={config.get(key)!r}, expected {value!r}"
        time.sleep(0.1)
    return config


def wait_gone(admin: AdminClient, topic: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if topic not in admin.list_topics(timeout=5).topics:
            return
        time.sleep(0.1)
    raise AssertionError(f"{topic} still listed {timeout}s after delete")


def test_create_describe_delete_topic(admin: AdminClient) -> None:
    name = group_name("admin")
    fut = admin.create_topics([NewTopic(name, num_partitions=4, replication_factor=1,
                                        config={"retention.ms": "3600000"})])
    fut[name].result(timeout=20)
    desc = admin.describe_topics(TopicCollection([name]))[name].result(timeout=20)
    assert desc.name == name
    assert sorted(p.id for p in desc.partitions) == [0, 1, 2, 3]
    assert all(p.leader is not None and len(p.replicas) == 1 for p in desc.partitions)
    assert len(admin.list_topics(topic=name, timeout=10).topics[name].partitions) == 4
    assert topic_config(admin, name)["retention.ms"] == "3600000"
    # Creating it again is TOPIC_ALREADY_EXISTS.
    again = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1)])
    with pytest.raises(KafkaException) as info:
        again[name].result(timeout=20)
    assert info.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    admin.delete_topics([name])[name].result(timeout=20)
    wait_gone(admin, name)


def test_validate_only_creates_nothing(admin: AdminClient) -> None:
    name = group_name("admin")
    admin.create_topics([NewTopic(name, 2, 1)], validate_only=True)[name].result(timeout=20)
    assert name not in admin.list_topics(timeout=10).topics


def test_invalid_topic_requests(admin: AdminClient) -> None:
    bad_config = group_name("admin")
    fut = admin.create_topics([NewTopic(bad_config, 1, 1, config={"cleanup.policy": "shred"})])
    with pytest.raises(KafkaException) as info:
        fut[bad_config].result(timeout=20)
    assert info.value.args[0].code() == KafkaError.INVALID_CONFIG
    missing = group_name("never-created")
    with pytest.raises(KafkaException) as info:
        admin.delete_topics([missing])[missing].result(timeout=20)
    assert info.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_create_partitions(admin: AdminClient, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=20)
    deadline = time.monotonic() + 20
    while len(admin.list_topics(topic=topic, timeout=5).topics[topic].partitions) != 5:
        assert time.monotonic() < deadline, "partitions not visible"
        time.sleep(0.1)
    with pytest.raises(KafkaException) as info:  # shrinking is not allowed
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(timeout=20)
    assert info.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_describe_and_alter_configs(admin: AdminClient, make_topic: Callable[..., str]) -> None:
    topic = make_topic(config={"retention.ms": "100000"})
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=10)
    assert entries["retention.ms"].value == "100000"
    assert not entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "delete" and entries["cleanup.policy"].is_default
    # Incremental: set one key, delete another, leave the rest.
    inc = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
    ])
    admin.incremental_alter_configs([inc])[inc].result(timeout=10)
    after = eventually_config(admin, topic, "segment.bytes", "1048576")
    assert after["segment.bytes"] == "1048576"
    assert after["retention.ms"] == "604800000"  # back to the broker default
    # Legacy AlterConfigs replaces the whole set: segment.bytes falls back to its default.
    legacy = ConfigResource(ResourceType.TOPIC, topic, set_config={"max.message.bytes": "65536"})
    admin.alter_configs([legacy])[legacy].result(timeout=10)
    after = eventually_config(admin, topic, "max.message.bytes", "65536")
    assert after["max.message.bytes"] == "65536"
    assert after["segment.bytes"] == "1073741824"


def test_describe_broker_config(admin: AdminClient) -> None:
    md = admin.list_topics(timeout=10)
    broker_id = str(next(iter(md.brokers)))
    res = ConfigResource(ResourceType.BROKER, broker_id)
    entries = admin.describe_configs([res])[res].result(timeout=10)
    assert "log.retention.hours" in entries or "log.retention.ms" in entries
    assert "num.partitions" in entries


def test_empty_cleanup_policy_is_accepted(admin: AdminClient, fresh_topic: str) -> None:
    """Kafka 3.9 and 4.3 accept an empty cleanup.policy (neither deletion nor compaction) and describe
    it as a dynamic topic config with the empty value."""
    res = ConfigResource(ResourceType.TOPIC, fresh_topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=20)
    eventually_config(admin, fresh_topic, "cleanup.policy", "")
    bad = ConfigResource(ResourceType.TOPIC, fresh_topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "shred", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as err:
        admin.incremental_alter_configs([bad])[bad].result(timeout=20)
    assert err.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_group_configs(admin: AdminClient, broker) -> None:
    """Kafka 4's GROUP config resource: defaults from the broker's group.* keys, a per-group override
    described as GROUP_CONFIG, values outside the broker's bounds and unknown names refused."""
    if broker.kind.startswith("kafka-3."):
        pytest.skip("Kafka 3.9 has no GROUP config resource")
    group = group_name()
    res = ConfigResource(ResourceType.GROUP, group)
    described = admin.describe_configs([res])[res].result(timeout=20)
    assert described["consumer.session.timeout.ms"].value == "45000"
    assert described["share.isolation.level"].value == "read_uncommitted"
    assert {"consumer.heartbeat.interval.ms", "share.record.lock.duration.ms", "streams.num.standby.replicas"} <= set(described)

    def alter(key: str, value: str) -> None:
        change = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([change])[change].result(timeout=20)

    alter("consumer.session.timeout.ms", "50000")
    deadline = time.monotonic() + 10
    while (entry := admin.describe_configs([res])[res].result(timeout=20)["consumer.session.timeout.ms"]).value != "50000":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert entry.source == 8  # GROUP_CONFIG
    for key, value in (("consumer.session.timeout.ms", "5"), ("no.such.group.config", "1")):
        with pytest.raises(KafkaException) as err:
            alter(key, value)
        assert err.value.args[0].code() == KafkaError.INVALID_CONFIG
