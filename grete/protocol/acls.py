"""ACLs as Kafka's wire and admin APIs name them: resource, pattern, operation and permission codes,
one ACL binding, and the filters of DescribeAcls / DeleteAcls (Kafka's AclBindingFilter). Sans I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"
WILDCARD_PRINCIPAL = "User:*"


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` is ALLOWed or DENYed ``operation`` from ``host`` on the resources
    ``(resource_type, resource_name, pattern_type)`` names (LITERAL or PREFIXED)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


class InvalidAcl(ValueError):
    """A binding or filter Kafka refuses (INVALID_REQUEST on the wire)."""


def validate_binding(acl: AclBinding) -> None:
    """CreateAcls' checks (Kafka's AclControlManager.validateNewAcl)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAcl(f"Invalid resourceType {acl.resource_type.name}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid patternType {acl.pattern_type.name}")
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAcl(f"Invalid operation {acl.operation.name}")
    if acl.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAcl(f"Invalid permissionType {acl.permission.name}")
    if not acl.resource_name:
        raise InvalidAcl("Resource name should not be empty")
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise InvalidAcl("The only valid name for the CLUSTER resource is kafka-cluster")
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidAcl(f"Could not parse principal from `{acl.principal}` (no colon is present "
                         "separating the principal type from the principal name)")
    if not acl.host:
        raise InvalidAcl("Host should not be empty")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """DescribeAcls' and DeleteAcls' filter: None fields match anything; ANY types match every value;
    pattern MATCH picks the ACLs that apply to ``resource_name`` (literal, ``*`` and prefixes)."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermissionType

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if not self._matches_pattern(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != AclOperation.ANY and acl.operation != self.operation:
            return False
        return self.permission == AclPermissionType.ANY or acl.permission == self.permission

    def _matches_pattern(self, acl: AclBinding) -> bool:
        name, pattern = self.resource_name, self.pattern_type
        if pattern == PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name in (name, WILDCARD)
            return name.startswith(acl.resource_name)
        if pattern != PatternType.ANY and acl.pattern_type != pattern:
            return False
        return name is None or acl.resource_name == name

    def validate(self) -> None:
        """What DeleteAcls / DescribeAcls refuse as INVALID_REQUEST."""
        for value, label in ((self.resource_type, "resourceType"), (self.pattern_type, "patternType"),
                             (self.operation, "operation"), (self.permission, "permissionType")):
            if value == 0:
                raise InvalidAcl(f"Filter contain UNKNOWN elements: {label}")
