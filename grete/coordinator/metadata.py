"""Cluster metadata behind one interface: topics, partitions, leader epochs, configs, cluster id.

Reads come from an in-memory cache (``topics()``, ``topic()``...), synchronous and cheap, for the
request handlers. Changes are asynchronous (``await store.create_topic(...)``): a store returns once
the change is durable, and then *publishes* it as a :class:`MetadataChange` to every subscriber.
The broker's replica manager is one: it opens, closes and reconfigures partitions in response, as a
Kafka broker acts on LeaderAndIsr, so no request handler opens a partition itself.

The single node keeps it in its KRaft metadata log (grete.coordinator.kraft); a ZooKeeper-backed
store implements the same interface for clusters. Every change is durable before it is published,
so topic ids and leader epochs survive restarts: Java clients ignore metadata whose leader epoch goes
back.
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from grete.protocol.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from grete.storage.files import uuid_from_kafka, uuid_to_kafka

METADATA_FILE = "grete-metadata.json"
log = logging.getLogger(__name__)


def new_topic_id() -> uuid.UUID:
    """A random id that Kafka would accept: never the zero id, never base64 starting with '-'."""
    while True:
        candidate = uuid.uuid4()
        if not uuid_to_kafka(candidate).startswith("-"):
            return candidate


@dataclass(slots=True)
class PartitionMeta:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    # In a cluster: replicas on brokers that are down or whose log dir failed (UpdateMetadata's
    # OfflineReplicas), and the partition epoch (the ZooKeeper state znode's version).
    offline_replicas: list[int] = field(default_factory=list)
    partition_epoch: int = 0
    # KRaft with eligible leader replicas (KIP-966): replicas that left the ISR while it was below
    # min.insync.replicas, so they hold everything committed; and the last leader, kept while the
    # partition has none.
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)
    # KRaft (KIP-858): the log dir holding each replica, in the order of ``replicas``; empty when
    # the metadata does not say (a single node, ZooKeeper mode, a metadata.version before 3.7).
    directories: list[uuid.UUID] = field(default_factory=list)

    def directory(self, replica: int) -> uuid.UUID | None:
        """The log dir the metadata assigns ``replica`` to; None when it does not say."""
        if len(self.directories) != len(self.replicas) or replica not in self.replicas:
            return None
        return self.directories[self.replicas.index(replica)]


@dataclass(slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionMeta]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


class ChangeKind(Enum):
    TOPIC_CREATED = "topic_created"
    TOPIC_DELETED = "topic_deleted"
    PARTITIONS_ADDED = "partitions_added"
    TOPIC_CONFIGS_CHANGED = "topic_configs_changed"
    BROKER_CONFIGS_CHANGED = "broker_configs_changed"
    GROUP_CONFIGS_CHANGED = "group_configs_changed"
    SCRAM_CREDENTIALS_CHANGED = "scram_credentials_changed"
    ACLS_CHANGED = "acls_changed"
    CLIENT_QUOTAS_CHANGED = "client_quotas_changed"
    DELEGATION_TOKENS_CHANGED = "delegation_tokens_changed"
    BROKERS_JOINED = "brokers_joined"  # a cluster's live brokers: ``brokers`` names the new ones


@dataclass(frozen=True, slots=True)
class MetadataChange:
    """One published change. ``topic`` is the topic as it stands after the change (as it stood
    before, for a deletion); ``partitions`` the partitions the change concerns."""

    kind: ChangeKind
    topic: TopicMeta | None = None
    partitions: tuple[int, ...] = ()
    brokers: tuple[int, ...] = ()


Subscriber = Callable[[MetadataChange], None]


class ChangeFeed:
    """Subscribers of a store, called in order on the store's loop once a change is durable."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.append(subscriber)

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def publish(self, change: MetadataChange) -> None:
        for subscriber in list(self._subscribers):
            subscriber(change)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """A SCRAM credential as Kafka stores it (UserScramCredentialRecord; under ZooKeeper
    ``/config/users/<user>`` as ``salt=...,stored_key=...,server_key=...,iterations=...``): never the
    password, nor the salted password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class DelegationTokenInfo:
    """A delegation token as Kafka keeps it (TokenInformation; under ZooKeeper the JSON of
    ``/delegation_token/tokens/<tokenId>``): never its HMAC, which the secret key gives back.
    Principals are ``Type:name`` strings; times are wall-clock milliseconds."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    max_ms: int
    expiry_ms: int

    def expired(self, now_ms: int) -> bool:
        """Kafka's test in its sweep and in renew/expire: strictly past either bound."""
        return self.max_ms < now_ms or self.expiry_ms < now_ms

    def owner_or_renewer(self, principal: str) -> bool:
        """TokenInformation.ownerOrRenewer (the requester counts too)."""
        return principal in (self.owner, self.requester) or principal in self.renewers


# A client quota entity as Kafka's ClientQuotaEntity names it: (entity type, name) pairs sorted by
# type, the types being "client-id", "ip" and "user"; a None name is that type's <default>.
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(pairs: dict[str, str | None]) -> QuotaEntity:
    return tuple(sorted(pairs.items()))


class TopicExists(Exception):
    pass


class NoSuchTopic(Exception):
    pass


class MetadataStore(Protocol):
    cluster_id: str
    # Whether changes are sent to another node that writes them (a KRaft broker's store, whose
    # controller logs them), not written by this one.
    forwards: bool

    changes: ChangeFeed

    # reads: the in-memory cache
    def topics(self) -> dict[str, TopicMeta]: ...
    def topic(self, name: str) -> TopicMeta | None: ...
    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None: ...
    def broker_configs(self, scope: str) -> dict[str, str]: ...
    def group_configs(self, group_id: str) -> dict[str, str]: ...
    def configured_groups(self) -> list[str]: ...
    def client_metrics(self, name: str) -> dict[str, str]: ...
    def client_metrics_names(self) -> list[str]: ...

    # changes: durable when the call returns, then published on ``changes``
    async def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                           internal: bool = False, elected: bool = True) -> TopicMeta | None:
        """Returns the topic once its leaders are known; with ``elected`` false, once it is durable
        (None where the leaders are not known yet: Kafka's auto-creation answers without them)."""
    async def delete_topic(self, name: str) -> TopicMeta: ...
    async def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMeta: ...
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    async def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None: ...
    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None: ...
    async def set_client_metrics(self, name: str, configs: dict[str, str]) -> None: ...
    async def validate_configs(self, resource_type: int, name: str, configs: dict[str, str]) -> None:
        """Refuses, as the set_* call would, a resource's new config set that the node writing it
        (a KRaft broker's controller) would refuse; applies nothing (a request's validate_only)."""
    async def allocate_producer_ids(self, count: int) -> int: ...

    # --- security: SCRAM credentials and ACLs ------------------------------------------
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...
    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]: ...
    async def set_scram_credential(self, user: str, mechanism: str, credential: ScramCredential | None) -> None: ...
    def acls(self) -> frozenset[AclBinding]: ...
    async def add_acls(self, acls: list[AclBinding]) -> None: ...
    async def remove_acls(self, acls: list[AclBinding]) -> None: ...

    # --- client quotas: values by entity, as /config/users|clients|ips hold them under ZooKeeper ---
    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]: ...
    async def alter_client_quotas(self, entity: QuotaEntity, changes: dict[str, float | None]) -> None: ...

    # --- delegation tokens: /delegation_token/tokens/<id> under ZooKeeper --------------------------
    def delegation_tokens(self) -> dict[str, DelegationTokenInfo]: ...
    async def set_delegation_token(self, token: DelegationTokenInfo) -> None: ...
    async def remove_delegation_token(self, token_id: str) -> None: ...


class MetadataState:
    """The metadata a store holds in memory, and its reads: the part every store shares. Stores
    differ in how a change becomes durable (a JSON file, ZooKeeper, the KRaft metadata log)."""

    forwards = False

    def __init__(self) -> None:
        self.cluster_id = ""
        self._topics: dict[str, TopicMeta] = {}
        self._by_id: dict[uuid.UUID, TopicMeta] = {}
        # Dynamic broker configs by scope, as /config/brokers/<scope> holds them under ZooKeeper:
        # a broker id, or "" for the cluster-wide default (Kafka's <default>).
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}
        # Client-metrics subscriptions (KIP-714 ConfigResource CLIENT_METRICS), by name.
        self._client_metrics: dict[str, dict[str, str]] = {}
        self._next_producer_id = 0
        self._scram: dict[str, dict[str, ScramCredential]] = {}  # user -> mechanism -> credential
        self._acls: frozenset[AclBinding] = frozenset()
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        # Finalized feature levels (KIP-584) and their epoch; None until first set: the broker's defaults.
        self._features: dict[str, int] | None = None
        self._features_epoch = 0
        self._tokens: dict[str, DelegationTokenInfo] = {}
        self.changes = ChangeFeed()

    # --- reads ---------------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicMeta]:
        return self._topics

    def topic(self, name: str) -> TopicMeta | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def broker_configs(self, scope: str) -> dict[str, str]:
        return dict(self._broker_configs.get(scope, {}))

    def broker_scopes(self) -> list[str]:
        """The scopes with dynamic broker configs: broker ids, and "" for the cluster default."""
        return sorted(self._broker_configs)

    @property
    def next_producer_id(self) -> int:
        return self._next_producer_id

    def group_configs(self, group_id: str) -> dict[str, str]:
        return dict(self._group_configs.get(group_id, {}))

    def configured_groups(self) -> list[str]:
        """The groups with config overrides (ListConfigResources' GROUP resources)."""
        return sorted(self._group_configs)

    def client_metrics(self, name: str) -> dict[str, str]:
        return dict(self._client_metrics.get(name, {}))

    def client_metrics_names(self) -> list[str]:
        return sorted(self._client_metrics)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._scram.get(user, {}).get(mechanism)

    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        return {user: dict(mechanisms) for user, mechanisms in self._scram.items()}

    def acls(self) -> frozenset[AclBinding]:
        return self._acls

    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def delegation_tokens(self) -> dict[str, DelegationTokenInfo]:
        return self._tokens

    def finalized_features(self) -> tuple[int, dict[str, int] | None]:
        """(epoch, levels); levels None when never updated (the broker applies its defaults)."""
        return self._features_epoch, None if self._features is None else dict(self._features)


class LegacyMetadataFile(MetadataState):
    """``<log dir>/grete-metadata.json``, where grete kept the single node's metadata before its
    KRaft metadata log: read once, to be taken over (grete.coordinator.kraft.local), never written."""

    def __init__(self, directory: Path) -> None:
        super().__init__()
        self.path = directory / METADATA_FILE
        self._load()

    def _load(self) -> None:
        data = json.loads(self.path.read_text(encoding="utf-8"))
        self.cluster_id = data["cluster_id"]
        self._group_configs = {str(g): dict(c) for g, c in data.get("group_configs", {}).items()}
        self._client_metrics = {str(n): dict(c) for n, c in data.get("client_metrics", {}).items()}
        stored = data.get("broker_configs", {})
        # Files written before dynamic broker configs held one flat (always empty) dict.
        self._broker_configs = {str(scope): dict(configs) for scope, configs in stored.items()
                                if isinstance(configs, dict)}
        self._next_producer_id = int(data.get("next_producer_id", 0))
        features = data.get("finalized_features")
        self._features = None if features is None else {str(k): int(v) for k, v in features.items()}
        self._features_epoch = int(data.get("finalized_features_epoch", 0))
        self._load_security(data)
        for raw in data["topics"]:
            meta = TopicMeta(
                raw["name"], uuid_from_kafka(raw["topic_id"]),
                {int(p): PartitionMeta(v["leader"], v["leader_epoch"], v["replicas"], v["isr"])
                 for p, v in raw["partitions"].items()},
                dict(raw.get("configs", {})), bool(raw.get("internal", False)))
            self._topics[meta.name] = meta
            self._by_id[meta.topic_id] = meta

    def _load_security(self, data: dict[str, object]) -> None:
        scram = data.get("scram_credentials", {})
        assert isinstance(scram, dict)
        self._scram = {str(user): {str(mech): ScramCredential(
            base64.b64decode(c["salt"]), base64.b64decode(c["stored_key"]), base64.b64decode(c["server_key"]),
            int(c["iterations"])) for mech, c in mechanisms.items()} for user, mechanisms in scram.items()}
        tokens = data.get("delegation_tokens", [])
        assert isinstance(tokens, list)
        self._tokens = {str(t["token_id"]): DelegationTokenInfo(
            str(t["token_id"]), str(t["owner"]), str(t["requester"]), tuple(str(r) for r in t["renewers"]),
            int(t["issue_ms"]), int(t["max_ms"]), int(t["expiry_ms"])) for t in tokens}
        quotas = data.get("client_quotas", [])
        assert isinstance(quotas, list)
        self._quotas = {tuple((str(t), None if n is None else str(n)) for t, n in q["entity"]):
                        {str(k): float(v) for k, v in q["values"].items()} for q in quotas}
        acls = data.get("acls", [])
        assert isinstance(acls, list)
        self._acls = frozenset(AclBinding(
            ResourceType[a["resource_type"]], a["resource_name"], PatternType[a["pattern_type"]], a["principal"],
            a["host"], AclOperation[a["operation"]], AclPermissionType[a["permission"]]) for a in acls)
