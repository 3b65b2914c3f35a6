"""Kafka 3.9's topic configs that Kafka 4 removed are known to a broker of a ZooKeeper cluster only
(compat-tests/cluster checks them against Kafka 3.9.2): the single node and KRaft brokers refuse
them as Kafka 4 does, and the timestamp difference bounds each side whose own bound is unset."""

from __future__ import annotations

import pytest

from grete.broker.config import ConfigError, validate_topic_configs
from grete.storage.config import LONG_MAX, LogConfig

REMOVED = {"message.format.version": "2.8", "message.downconversion.enable": "false",
           "message.timestamp.difference.max.ms": "60000"}


@pytest.mark.parametrize("key", sorted(REMOVED))
def test_kafka_4_brokers_refuse_them(key: str) -> None:
    with pytest.raises(ConfigError, match=f"Unknown topic config name: {key}"):
        validate_topic_configs({key: REMOVED[key]})
    assert validate_topic_configs({key: REMOVED[key]}, zookeeper_mode=True) == {key: REMOVED[key]}


@pytest.mark.parametrize("good", ["0.8.2", "0.10.0-IV1", "0.10.2.1", "1.1", "2.8", "3.0-IV1", "3.9"])
def test_message_format_versions_by_kafka_3_9_names(good: str) -> None:
    validate_topic_configs({"message.format.version": good}, zookeeper_mode=True)


@pytest.mark.parametrize("bad", ["banana", "4.0", "0.7", "3", ""])
def test_a_message_format_version_kafka_3_9_does_not_know(bad: str) -> None:
    with pytest.raises(ConfigError, match="is not a valid version"):
        validate_topic_configs({"message.format.version": bad}, zookeeper_mode=True)


def test_the_difference_bounds_the_sides_left_unset() -> None:
    both = LogConfig.from_kafka({"message.timestamp.difference.max.ms": "60000"})
    assert (both.message_timestamp_before_max_ms, both.message_timestamp_after_max_ms) == (60000, 60000)
    own = LogConfig.from_kafka({"message.timestamp.difference.max.ms": "60000",
                                "message.timestamp.before.max.ms": "5000"})
    assert (own.message_timestamp_before_max_ms, own.message_timestamp_after_max_ms) == (5000, 60000)
    assert LogConfig.from_kafka({}).message_timestamp_before_max_ms == LONG_MAX
