"""kafka-configs on client quotas (AlterClientQuotas / DescribeClientQuotas): clients, users, a
(user, client-id) pair and the <default> entities; values Kafka refuses."""

from __future__ import annotations

import uuid

import pytest

from tools import kafka_dist


@pytest.fixture
def kafka_cli(kafka_cli):  # type: ignore[no-untyped-def]
    """The newest pinned tools only: the quota commands are the same client code in both, and each
    kafka-configs run starts a JVM (the suite's time budget)."""
    if kafka_cli.version != kafka_dist.PINNED[-1]:
        pytest.skip(f"quota commands run with the Kafka {kafka_dist.PINNED[-1]} tools only")
    return kafka_cli


def quota_lines(out: str) -> dict[str, str]:
    """``Quota configs for client-id 'x' are producer_byte_rate=1024.0, ...`` -> {entity: values}."""
    found = {}
    for line in out.splitlines():
        if line.startswith("Quota configs for "):
            entity, _, values = line[len("Quota configs for "):].partition(" are ")
            found[entity] = values
    return found


def test_client_and_user_quotas(kafka_cli):
    client, user = f"c-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    kafka_cli.ok("kafka-configs", "--alter", "--entity-type", "clients", "--entity-name", client,
                 "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048,request_percentage=12.5")
    out = kafka_cli.ok("kafka-configs", "--describe", "--entity-type", "clients", "--entity-name", client)
    values = quota_lines(out)[f"client-id '{client}'"]
    assert set(values.split(", ")) == {"producer_byte_rate=1024.0", "consumer_byte_rate=2048.0",
                                       "request_percentage=12.5"}, out

    kafka_cli.ok("kafka-configs", "--alter", "--entity-type", "users", "--entity-name", user,
                 "--entity-type", "clients", "--entity-name", client, "--add-config", "producer_byte_rate=4096")
    out = kafka_cli.ok("kafka-configs", "--describe", "--entity-type", "users", "--entity-name", user,
                       "--entity-type", "clients", "--entity-name", client)
    assert quota_lines(out) == {f"user-principal '{user}', client-id '{client}'": "producer_byte_rate=4096.0"}, out

    kafka_cli.ok("kafka-configs", "--alter", "--entity-type", "clients", "--entity-name", client,
                 "--delete-config", "consumer_byte_rate,request_percentage")
    out = kafka_cli.ok("kafka-configs", "--describe", "--entity-type", "clients", "--entity-name", client)
    assert quota_lines(out) == {f"client-id '{client}'": "producer_byte_rate=1024.0"}, out
    kafka_cli.ok("kafka-configs", "--alter", "--entity-type", "clients", "--entity-name", client,
                 "--delete-config", "producer_byte_rate")
    kafka_cli.ok("kafka-configs", "--alter", "--entity-type", "users", "--entity-name", user,
                 "--entity-type", "clients", "--entity-name", client, "--delete-config", "producer_byte_rate")
    out = kafka_cli.ok("kafka-configs", "--describe", "--entity-type", "clients", "--entity-name", client)
    assert quota_lines(out) == {}, out


def test_default_user_quota(kafka_cli):
    kafka_cli.ok("kafka-configs", "--alter", "--entity-type", "users", "--entity-default",
                 "--add-config", "consumer_byte_rate=1000000")
    try:
        out = kafka_cli.ok("kafka-configs", "--describe", "--entity-type", "users", "--entity-default")
        assert quota_lines(out) == {"the default user-principal": "consumer_byte_rate=1000000.0"}, out
    finally:
        kafka_cli.ok("kafka-configs", "--alter", "--entity-type", "users", "--entity-default",
                     "--delete-config", "consumer_byte_rate")


def test_refused_values(kafka_cli):
    client = f"c-{uuid.uuid4().hex[:8]}"
    for bad, words in (("producer_byte_rate=10.5", "cannot be a fractional value"),
                       ("producer_byte_rate=-1", "must be greater than 0"),
                       ("no_such_quota=1", "no_such_quota")):
        done = kafka_cli.run("kafka-configs", "--alter", "--entity-type", "clients", "--entity-name", client,
                             "--add-config", bad)
        assert done.returncode != 0, bad
        assert words in done.stdout + done.stderr, (bad, done.stdout[-2000:], done.stderr[-2000:])
