"""The ACL authorizer, with the semantics of Kafka's StandardAuthorizer (and ZooKeeper-era
AclAuthorizer, which agree): switched on by ``authorizer.class.name`` naming either.

An ``authorize`` call asks whether ``principal`` from ``host`` may do ``operation`` on the resource
``(resource_type, name)``:

1. a principal in ``super.users`` (``User:a;User:b``) may do everything;
2. the ACLs that apply to the resource are its LITERAL name, the LITERAL wildcard ``*`` and every
   PREFIXED pattern the name starts with; of those, the ones for the principal or ``User:*`` and for
   the host or ``*`` match;
3. a matching DENY (of the operation or of ALL) wins over any ALLOW;
4. a matching ALLOW allows: of the operation, of ALL, and, for ALLOW only, the implied ones: READ,
   WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS;
5. with no match: ``allow.everyone.if.no.acl.found`` if no ACL at all applies to the resource
   (whatever its principal), else DENY.

ACLs live in the metadata store; the authorizer keeps an index rebuilt when they change.
"""

from __future__ import annotations

from collections import defaultdict

from grete.broker.config import BrokerConfig, ConfigError
from grete.coordinator.metadata import ChangeKind, MetadataChange, MetadataStore
from grete.protocol.acls import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer",
                      "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
WILDCARD_HOST = "*"
_IMPLIES_DESCRIBE = frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER,
                               AclOperation.DESCRIBE})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.ALTER_CONFIGS, AclOperation.DESCRIBE_CONFIGS})

# The operations Kafka reports in Metadata's / DescribeCluster's authorized-operations bitfields.
TOPIC_OPERATIONS = (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                    AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                    AclOperation.ALTER_CONFIGS)
CLUSTER_OPERATIONS = (AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
                      AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE)
# A group's: Kafka 4's, where groups have configs (3.9's lacked DESCRIBE_CONFIGS and ALTER_CONFIGS).
GROUP_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                    AclOperation.ALTER_CONFIGS)


def configured(config: BrokerConfig) -> bool:
    """Is an authorizer asked for? ConfigError for a class grete does not have."""
    name = config.get_str("authorizer.class.name").strip()
    if not name:
        return False
    if name not in AUTHORIZER_CLASSES:
        raise ConfigError(f"authorizer.class.name {name}: grete provides Kafka's ACL authorizer under "
                          f"the names {' and '.join(AUTHORIZER_CLASSES)}")
    return True


def _allows(acl_operation: AclOperation, wanted: AclOperation) -> bool:
    if acl_operation == AclOperation.ALL or acl_operation == wanted:
        return True
    if wanted == AclOperation.DESCRIBE:
        return acl_operation in _IMPLIES_DESCRIBE
    if wanted == AclOperation.DESCRIBE_CONFIGS:
        return acl_operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


class AclAuthorizer:
    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.super_users = frozenset(p.strip() for p in config.get_str("super.users").split(";") if p.strip())
        self.allow_if_no_acl = config.get_bool("allow.everyone.if.no.acl.found")
        self._store = store
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[ResourceType, list[AclBinding]] = {}
        # Bumped by every ACL change: an answer remembered for a repeated request (the idle Fetch
        # memo) is used again only under the ACLs it was authorized by.
        self.generation = 0
        self._rebuild()
        store.changes.subscribe(self._on_change)

    def _on_change(self, change: MetadataChange) -> None:
        if change.kind == ChangeKind.ACLS_CHANGED:
            self._rebuild()

    def _rebuild(self) -> None:
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        prefixed: dict[ResourceType, list[AclBinding]] = defaultdict(list)
        for acl in self._store.acls():
            if acl.pattern_type == PatternType.LITERAL:
                literal[(acl.resource_type, acl.resource_name)].append(acl)
            elif acl.pattern_type == PatternType.PREFIXED:
                prefixed[acl.resource_type].append(acl)
        self._literal, self._prefixed = dict(literal), dict(prefixed)
        self.generation += 1

    def _resource_acls(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self._literal.get((resource_type, WILDCARD), ())
        found += [a for a in self._prefixed.get(resource_type, ()) if name.startswith(a.resource_name)]
        return found

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = self._resource_acls(resource_type, name)
        if not acls:
            return self.allow_if_no_acl
        allowed = False
        for acl in acls:
            if acl.principal not in (principal, WILDCARD_PRINCIPAL) or acl.host not in (host, WILDCARD_HOST):
                continue
            if acl.permission == AclPermissionType.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    return False  # DENY wins; implications are for ALLOW only
            elif _allows(acl.operation, operation):
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: may ``principal`` do ``operation`` on *some* resource of
        the type? (InitProducerId's WRITE-on-any-topic rule.) An ALLOW on a pattern not entirely
        covered by a DENY of the same principal counts; a DENY on the wildcard resource refuses."""
        if principal in self.super_users:
            return True
        matching = [a for acls in (*self._literal.values(), *self._prefixed.values()) for a in acls
                    if a.resource_type == resource_type and a.principal in (principal, WILDCARD_PRINCIPAL)
                    and a.host in (host, WILDCARD_HOST) and a.operation in (operation, AclOperation.ALL)]
        denies = [a for a in matching if a.permission == AclPermissionType.DENY]
        if any(d.resource_name == WILDCARD and d.pattern_type == PatternType.LITERAL for d in denies):
            return False
        for allow in (a for a in matching if a.permission == AclPermissionType.ALLOW):
            covered = any(d.pattern_type == PatternType.PREFIXED and allow.resource_name.startswith(d.resource_name)
                          or d.pattern_type == allow.pattern_type and d.resource_name == allow.resource_name
                          for d in denies)
            if not covered:
                return True
        if self.allow_if_no_acl:
            return not any(a.resource_type == resource_type for acls in
                           (*self._literal.values(), *self._prefixed.values()) for a in acls)
        return False

    def operations(self, principal: str, host: str, resource_type: ResourceType, name: str,
                   candidates: tuple[AclOperation, ...]) -> int:
        """The authorized-operations bitfield (1 << operation code) over ``candidates``."""
        bits = 0
        for operation in candidates:
            if self.authorize(principal, host, operation, resource_type, name):
                bits |= 1 << int(operation)
        return bits
