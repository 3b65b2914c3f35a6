"""kafka-configs: describe and alter topic configs, describe broker configs."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from tools import kafka_dist


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    """The topic's effective configs as librdkafka's DescribeConfigs sees them (an independent reader)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=20)
    return {k: e.value for k, e in entries.items()}


def dynamic_entries(out: str) -> dict[str, str]:
    """key=value pairs listed under "Dynamic configs for topic ... are:"."""
    found: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        entry = line.strip().split(" ", 1)[0]
        if "=" in entry:
            key, value = entry.split("=", 1)
            found[key] = value
    return found


def test_topic_describe_alter_delete(kafka_cli, broker, fresh_topic):
    base = ("--entity-type", "topics", "--entity-name", fresh_topic)
    out = kafka_cli.ok("kafka-configs", *base, "--describe")
    assert f"Dynamic configs for topic {fresh_topic} are:" in out
    assert dynamic_entries(out) == {}

    kafka_cli.ok("kafka-configs", *base, "--alter", "--add-config", "retention.ms=123456,cleanup.policy=compact")
    out = kafka_cli.ok("kafka-configs", *base, "--describe")
    entries = dynamic_entries(out)
    assert entries.get("retention.ms") == "123456", out
    assert entries.get("cleanup.policy") == "compact", out
    seen = topic_config(broker.bootstrap, fresh_topic)
    assert seen["retention.ms"] == "123456" and seen["cleanup.policy"] == "compact"

    kafka_cli.ok("kafka-configs", *base, "--alter", "--delete-config", "retention.ms")
    entries = dynamic_entries(kafka_cli.ok("kafka-configs", *base, "--describe"))
    assert "retention.ms" not in entries and entries.get("cleanup.policy") == "compact"
    # Back to the default: seven days.
    assert topic_config(broker.bootstrap, fresh_topic)["retention.ms"] == "604800000"


def test_alter_rejects_invalid_value(kafka_cli, fresh_topic):
    done = kafka_cli.run("kafka-configs", "--entity-type", "topics", "--entity-name", fresh_topic,
                         "--alter", "--add-config", "cleanup.policy=sometimes")
    assert done.returncode != 0
    assert "cleanup.policy" in done.stdout + done.stderr


def test_broker_describe_all(kafka_cli, broker):
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    broker_id = str(next(iter(md.brokers)))
    out = kafka_cli.ok("kafka-configs", "--entity-type", "brokers", "--entity-name", broker_id,
                       "--describe", "--all")
    assert f"All configs for broker {broker_id} are:" in out
    keys = {line.strip().split("=", 1)[0] for line in out.splitlines()[1:] if "=" in line}
    assert {"log.segment.bytes", "num.partitions", "log.retention.hours"} <= keys, out


def test_dynamic_broker_configs(kafka_cli, broker):
    """kafka-configs on brokers: a per-broker dynamic config and a cluster-wide default are stored,
    described with their sources, and deleted; a static key is refused."""
    if kafka_cli.version != kafka_dist.PINNED[-1]:  # one JVM-heavy run is enough (the suite's budget)
        pytest.skip(f"run with the Kafka {kafka_dist.PINNED[-1]} tools only")
    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    broker_id = str(next(iter(md.brokers)))
    one = ("--entity-type", "brokers", "--entity-name", broker_id)
    default = ("--entity-type", "brokers", "--entity-default")
    kafka_cli.ok("kafka-configs", *one, "--alter", "--add-config", "sasl.kerberos.min.time.before.relogin=60001")
    kafka_cli.ok("kafka-configs", *default, "--alter", "--add-config", "log.retention.ms=86400001")
    try:
        out = kafka_cli.ok("kafka-configs", *one, "--describe")
        assert "sasl.kerberos.min.time.before.relogin=60001" in out, out
        assert "DYNAMIC_BROKER_CONFIG" in out, out
        out = kafka_cli.ok("kafka-configs", *default, "--describe")
        assert "log.retention.ms=86400001" in out and "DYNAMIC_DEFAULT_BROKER_CONFIG" in out, out
        refused = kafka_cli.run("kafka-configs", *one, "--alter", "--add-config", "log.dirs=/elsewhere")
        assert refused.returncode != 0
        assert "Cannot update these configs dynamically" in refused.stdout + refused.stderr
    finally:
        kafka_cli.ok("kafka-configs", *one, "--alter", "--delete-config", "sasl.kerberos.min.time.before.relogin")
        kafka_cli.ok("kafka-configs", *default, "--alter", "--delete-config", "log.retention.ms")
    out = kafka_cli.ok("kafka-configs", *one, "--describe")
    assert "sasl.kerberos.min.time.before.relogin" not in out, out
