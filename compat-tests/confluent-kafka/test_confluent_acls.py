"""ACL admin calls against a broker without an authorizer (Kafka's default and grete's only mode):
creations and deletions fail with SECURITY_DISABLED, describe reports nothing."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

ANY = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                       AclPermissionType.ANY)


def test_acl_calls_without_an_authorizer(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert admin.describe_acls(ANY).result(30) == []
    acl = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:x", "*", AclOperation.READ,
                     AclPermissionType.ALLOW)
    for future in list(admin.create_acls([acl]).values()) + list(admin.delete_acls([ANY]).values()):
        with pytest.raises(KafkaException) as failed:
            future.result(30)
        assert failed.value.args[0].code() == KafkaError.SECURITY_DISABLED
