"""kafka-configs for SCRAM users (AlterUserScramCredentials / DescribeUserScramCredentials), read back
through librdkafka's Admin API as an independent reader."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)


def described(bootstrap: str, user: str) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_user_scram_credentials([user])[user].result(timeout=20)
    return {info.mechanism.name: info.iterations for info in description.scram_credential_infos}


def test_scram_users_add_describe_delete(kafka_cli, broker):
    user = f"u{uuid.uuid4().hex[:8]}"
    base = ("--entity-type", "users", "--entity-name", user)
    # Two mechanisms of one user in one request: DUPLICATE_RESOURCE (Kafka's rule: a user once per request).
    both = kafka_cli.run("kafka-configs", *base, "--alter", "--add-config",
                         "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=other]")
    assert both.returncode != 0 and "DuplicateResourceException" in both.stderr, both.stderr[-2000:]
    kafka_cli.ok("kafka-configs", *base, "--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]")
    kafka_cli.ok("kafka-configs", *base, "--alter", "--add-config", "SCRAM-SHA-512=[password=other]")
    assert described(broker.bootstrap, user) == {"SCRAM_SHA_256": 8192, "SCRAM_SHA_512": 4096}
    # The tool's own describe asks DescribeUserScramCredentials and DescribeClientQuotas.
    shown = kafka_cli.run("kafka-configs", *base, "--describe")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "SCRAM-SHA-256=iterations=8192" in shown.stdout and "SCRAM-SHA-512=iterations=4096" in shown.stdout, \
        shown.stdout
    kafka_cli.ok("kafka-configs", *base, "--alter", "--delete-config", "SCRAM-SHA-512")
    assert described(broker.bootstrap, user) == {"SCRAM_SHA_256": 8192}
    # The CLI itself refuses too few iterations; too many is the broker's refusal (UNACCEPTABLE_CREDENTIAL).
    refused = kafka_cli.run("kafka-configs", *base, "--alter", "--add-config",
                            "SCRAM-SHA-256=[iterations=1024,password=x]")
    assert refused.returncode != 0 and "minimum 4096" in refused.stderr
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 20000), b"x")])[user]
    with pytest.raises(KafkaException) as exc:
        future.result(timeout=20)
    assert exc.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert described(broker.bootstrap, user) == {"SCRAM_SHA_256": 8192}
