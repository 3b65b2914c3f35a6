"""Admin APIs driven by stock clients: confluent-kafka's AdminClient (librdkafka) and
kafka-python's KafkaAdminClient, against a real in-process broker."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)


def _admin(b: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap_servers})


def test_confluent_topic_lifecycle(grete_broker: Any, topic_name: str) -> None:
    admin = _admin(grete_broker)
    admin.create_topics([NewTopic(topic_name, 2, 1, config={"retention.ms": "90000"})])[topic_name].result(10)
    with pytest.raises(KafkaException) as err:
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(10)
    assert err.value.args[0].name() == "TOPIC_ALREADY_EXISTS"
    admin.create_partitions([NewPartitions(topic_name, 3)])[topic_name].result(10)
    assert len(admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions) == 3

    resource = ConfigResource("topic", topic_name)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["retention.ms"].value == "90000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    change = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([change])[change].result(10)
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.ms"].value == "604800000"

    admin.delete_topics([topic_name])[topic_name].result(10)
    assert grete_broker.broker.metadata.topic(topic_name) is None


def test_confluent_delete_records_and_cluster(grete_broker: Any, topic_name: str) -> None:
    grete_broker.create_topic(topic_name, 1)
    producer = Producer({"bootstrap.servers": grete_broker.bootstrap_servers})
    for i in range(8):
        producer.produce(topic_name, value=b"%d" % i, partition=0)
    assert producer.flush(10) == 0
    admin = _admin(grete_broker)
    (result,) = admin.delete_records([TopicPartition(topic_name, 0, 5)]).values()
    assert result.result(10).low_watermark == 5
    cluster = admin.describe_cluster().result(10)
    assert cluster.controller.id == 1 and [n.id for n in cluster.nodes] == [1]
    assert cluster.cluster_id == grete_broker.broker.metadata.cluster_id
    broker_res = ConfigResource("broker", "1")
    configs = admin.describe_configs([broker_res])[broker_res].result(10)
    assert configs["num.partitions"].value == "1" and configs["num.partitions"].is_read_only


def test_kafka_python_admin(grete_broker: Any, topic_name: str) -> None:
    from kafka.admin import ConfigResource as KPConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewPartitions as KPNewPartitions
    from kafka.admin import NewTopic as KPNewTopic

    admin = KafkaAdminClient(bootstrap_servers=grete_broker.bootstrap_servers, request_timeout_ms=10000)
    try:
        admin.create_topics([KPNewTopic(topic_name, 2, 1, topic_configs={"segment.bytes": "3000000"})])
        admin.create_partitions({topic_name: KPNewPartitions(4)})
        assert len(grete_broker.broker.metadata.topic(topic_name).partitions) == 4
        admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, topic_name,
                                              configs={"retention.ms": "12345"})])
        # kafka-python 3.x sends IncrementalAlterConfigs (SET) by default ...
        assert grete_broker.broker.metadata.topic(topic_name).configs == {
            "segment.bytes": "3000000", "retention.ms": "12345"}
        # ... and legacy AlterConfigs on request: it describes first and resends the other
        # overrides, since AlterConfigs replaces the whole set.
        admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, topic_name,
                                              configs={"retention.ms": "54321"})], incremental=False)
        assert grete_broker.broker.metadata.topic(topic_name).configs == {
            "segment.bytes": "3000000", "retention.ms": "54321"}
        described = admin.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, topic_name)])
        entry = described["topic"][topic_name]["retention.ms"]
        assert (entry["value"], entry["config_source"], entry["config_type"]) == (
            "54321", "DYNAMIC_TOPIC_CONFIG", "LONG")
        admin.delete_topics([topic_name])
        assert grete_broker.broker.metadata.topic(topic_name) is None
    finally:
        admin.close()
