"""Kafka 3.9's ZooKeeper layout: every path grete reads or writes, and each znode's JSON, byte for
byte as Kafka's ``ZkData`` writes it (compact JSON, the same keys, the same quirks: a string
``version`` in ``/cluster/id``, timestamps and producer-id bounds as strings, a bare decimal in
``/controller_epoch``).

Pure data: no I/O. The ZooKeeper client (``zk_client``) moves bytes; this module says what they are,
so a broker registered by grete reads like one registered by Kafka 3.9, and the reverse.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import Any

from grete.coordinator.metadata import DelegationTokenInfo
from grete.storage.files import uuid_from_kafka, uuid_to_kafka

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
FEATURE = "/feature"
# Delegation tokens (Kafka 3.9's DelegationTokenManagerZk): one znode per token, and a sequential
# notification (the token id as its data) each time one is created, renewed, expired or removed.
DELEGATION_TOKEN_ROOT = "/delegation_token"
DELEGATION_TOKENS = "/delegation_token/tokens"
DELEGATION_TOKEN_CHANGES = "/delegation_token/token_changes"
DELEGATION_TOKEN_CHANGE_PREFIX = "token_change_"
CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")
# Group configs (Kafka 4's ConfigType.GROUP) under /config/groups/<sanitized group id>, notified on
# /config/changes as the others are. Not a persistent path: Kafka 3.9 has no such config type.
GROUP_CONFIGS = "groups"
DEFAULT_ENTITY = "<default>"

# What every broker creates at start-up if missing (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS = (
    "/consumers", BROKER_IDS, BROKER_TOPICS, CONFIG_CHANGES, DELETE_TOPICS, BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION, LATEST_PRODUCER_ID_BLOCK, LOG_DIR_EVENT_NOTIFICATION,
    *(f"/config/{kind}" for kind in CONFIG_TYPES),
)

# Security protocol names as the registration's listener map spells them.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# What a stock 3.9 broker advertises in its registration, and what a 3.9 controller finalizes in
# /feature on its first election: a broker lacking a finalized feature is silently ignored by it.
# A 3.9 broker in ZooKeeper mode supports no features (KafkaServer builds BrokerFeatures.createEmpty):
# its registration says "features":{} and a 3.9 controller writes /feature with none finalized.
# (A level-0 entry there is not even readable by Kafka's FeatureZNode decoder, so a grete
# controller must not write one.)
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {}
FINALIZED_FEATURES: dict[str, int] = {}
PRODUCER_ID_BLOCK_SIZE = 1000


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _loads(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def consumer_offset_path(group: str, topic: str, partition: int) -> str:
    """Where OffsetCommit v0 keeps a group's offset (Kafka 3.9's ConsumerPathZNode), as decimal text."""
    return f"/consumers/{group}/offsets/{topic}/{partition}"


def config_root(kind: str) -> str:
    return f"/config/{kind}"


def config_path(kind: str, entity: str) -> str:
    return f"{config_root(kind)}/{entity}"


# --- /cluster/id ---------------------------------------------------------------------------------
def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_loads(data)["id"])


# --- /controller and /controller_epoch ------------------------------------------------------------
def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dumps({"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms),
                   "kraftControllerEpoch": -1})


def decode_controller(data: bytes) -> int:
    return int(_loads(data)["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    return int(data.decode("ascii").strip())


# --- /brokers/ids/<id> -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class EndPoint:
    listener: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """One registered broker: what UpdateMetadata's LiveBrokers carries, plus its epoch (the
    registration znode's czxid), which only a read of the znode gives."""

    id: int
    endpoints: tuple[EndPoint, ...]
    rack: str | None = None
    epoch: int = -1
    features: dict[str, tuple[int, int]] = field(default_factory=dict)
    cordoned: bool = False  # every log dir cordoned (KIP-1066, KRaft): no new replica is placed here

    def endpoint(self, listener: str) -> EndPoint | None:
        return next((e for e in self.endpoints if e.listener == listener), None)


def encode_broker(info: BrokerInfo, timestamp_ms: int) -> bytes:
    """Registration JSON v5 (``BrokerIdZNode.encode``): host/port name the first PLAINTEXT
    endpoint (null/-1 without one); jmx_port is mandatory for Kafka's decoder."""
    plain = next((e for e in info.endpoints if e.security_protocol == "PLAINTEXT"), None)
    value: dict[str, Any] = {
        "features": {name: {"min_version": lo, "max_version": hi}
                     for name, (lo, hi) in (info.features or SUPPORTED_FEATURES).items()},
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in info.endpoints},
        "endpoints": [f"{e.listener}://{e.host}:{e.port}" for e in info.endpoints],
        "jmx_port": -1,
        "port": plain.port if plain else -1,
        "host": plain.host if plain else None,
        "version": 5,
        "timestamp": str(timestamp_ms),
    }
    if info.rack is not None:
        value["rack"] = info.rack
    return _dumps(value)


def decode_broker(broker_id: int, data: bytes, epoch: int = -1) -> BrokerInfo:
    raw = _loads(data)
    protocols = raw.get("listener_security_protocol_map") or {p: p for p in SECURITY_PROTOCOLS}
    endpoints = []
    for text in raw.get("endpoints") or []:
        listener, _, address = text.partition("://")
        host, _, port = address.rpartition(":")
        endpoints.append(EndPoint(listener, host.strip("[]"), int(port), protocols.get(listener, listener)))
    features = {name: (int(r["min_version"]), int(r["max_version"]))
                for name, r in (raw.get("features") or {}).items()}
    return BrokerInfo(broker_id, tuple(endpoints), raw.get("rack"), epoch, features)


# --- /brokers/topics/<t> ---------------------------------------------------------------------------
@dataclass(slots=True)
class TopicAssignment:
    partitions: dict[int, list[int]]
    topic_id: uuid.UUID | None
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)


def encode_topic(assignment: TopicAssignment) -> bytes:
    # Kafka's key order: partitions, topic_id, adding_replicas, removing_replicas, version.
    value: dict[str, Any] = {"partitions": {str(p): r for p, r in sorted(assignment.partitions.items())}}
    if assignment.topic_id is not None:
        value["topic_id"] = uuid_to_kafka(assignment.topic_id)
    value["adding_replicas"] = {str(p): r for p, r in sorted(assignment.adding.items())}
    value["removing_replicas"] = {str(p): r for p, r in sorted(assignment.removing.items())}
    value["version"] = 3
    return _dumps(value)


def decode_topic(data: bytes) -> TopicAssignment:
    raw = _loads(data)

    def replicas(key: str) -> dict[int, list[int]]:
        return {int(p): [int(b) for b in r] for p, r in (raw.get(key) or {}).items()}
    topic_id = raw.get("topic_id")
    return TopicAssignment(replicas("partitions"), uuid_from_kafka(topic_id) if topic_id else None,
                           replicas("adding_replicas"), replicas("removing_replicas"))


# --- /brokers/topics/<t>/partitions/<p>/state ------------------------------------------------------
@dataclass(slots=True)
class PartitionState:
    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int
    recovering: bool = False
    zk_version: int = 0  # the state znode's version: the partition epoch, not part of the JSON


def encode_partition_state(state: PartitionState) -> bytes:
    value: dict[str, Any] = {"controller_epoch": state.controller_epoch, "leader": state.leader,
                             "version": 1, "leader_epoch": state.leader_epoch, "isr": state.isr}
    if state.recovering:
        value["leader_recovery_state"] = 1
    return _dumps(value)


def decode_partition_state(data: bytes, zk_version: int = 0) -> PartitionState:
    raw = _loads(data)
    return PartitionState(int(raw["leader"]), int(raw["leader_epoch"]), [int(b) for b in raw["isr"]],
                          int(raw["controller_epoch"]), raw.get("leader_recovery_state", 0) == 1,
                          zk_version)


# --- /config/<type>/<entity> and /config/changes ---------------------------------------------------
def encode_config(configs: dict[str, str]) -> bytes:
    return _dumps({"version": 1, "config": dict(sorted(configs.items()))})


def decode_config(data: bytes) -> dict[str, str]:
    return {str(k): str(v) for k, v in (_loads(data).get("config") or {}).items()}


def encode_config_change(kind: str, entity: str) -> bytes:
    return _dumps({"version": 2, "entity_path": f"{kind}/{entity}"})


def decode_config_change(data: bytes) -> tuple[str, str]:
    raw = _loads(data)
    if raw.get("version") == 1:  # pre-2.0 notifications name type and entity separately
        return str(raw["entity_type"]), str(raw["entity_name"])
    kind, _, entity = str(raw["entity_path"]).partition("/")
    return kind, entity


# --- /log_dir_event_notification (a broker's log dir failed) --------------------------------------
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1


def encode_log_dir_event(broker_id: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "event": LOG_DIR_FAILURE_EVENT})


def decode_log_dir_event(data: bytes) -> int | None:
    """The broker a log dir event names; None for one that cannot be read."""
    try:
        return int(_loads(data)["broker"])
    except (ValueError, KeyError, TypeError):
        return None


# --- /latest_producer_id_block -------------------------------------------------------------------
def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    return _dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)})


def decode_producer_id_block(data: bytes) -> tuple[int, int]:
    """(block_start, block_end) of the last block handed out, inclusive; (-1, -1) when none was."""
    if not data:
        return -1, -1
    raw = _loads(data)
    return int(raw["block_start"]), int(raw["block_end"])


# --- /feature --------------------------------------------------------------------------------------
def encode_feature(finalized: dict[str, int]) -> bytes:
    return _dumps({"features": {name: {"max_version_level": level} for name, level in finalized.items()},
                   "version": 2, "status": 1})


def decode_feature(data: bytes) -> dict[str, int]:
    raw = _loads(data)
    if raw.get("status") != 1:
        return {}
    return {name: int(r["max_version_level"]) for name, r in (raw.get("features") or {}).items()}


# --- /admin/reassign_partitions and /admin/preferred_replica_election -----------------------------
def decode_partition_list(data: bytes) -> list[tuple[str, int, list[int] | None]]:
    """(topic, partition, target replicas or None) from the legacy admin znodes."""
    raw = _loads(data)
    found = []
    for entry in raw.get("partitions") or []:
        replicas = entry.get("replicas")
        found.append((str(entry["topic"]), int(entry["partition"]),
                      [int(r) for r in replicas] if replicas is not None else None))
    return found


# --- ACLs: /kafka-acl (literal), /kafka-acl-extended/prefixed, and their change notifications ----
ACL_LITERAL_ROOT = "/kafka-acl"
ACL_PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
ACL_LITERAL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"
# Kafka's names for resource types, operations and permissions as its ZooKeeper ACL JSON spells them.
ACL_RESOURCE_NAMES = {"Topic": 2, "Group": 3, "Cluster": 4, "TransactionalId": 5, "DelegationToken": 6, "User": 7}
# The change notifications name the type as Java's ResourceType enum (TOPIC:name, "resourceType":
# "TOPIC"); Kafka 3.9 writes those and reads either spelling.
ACL_RESOURCE_ENUM_NAMES = {"TOPIC": 2, "GROUP": 3, "CLUSTER": 4, "TRANSACTIONAL_ID": 5, "DELEGATION_TOKEN": 6,
                           "USER": 7}
ACL_OPERATION_NAMES = {"All": 2, "Read": 3, "Write": 4, "Create": 5, "Delete": 6, "Alter": 7, "Describe": 8,
                       "ClusterAction": 9, "DescribeConfigs": 10, "AlterConfigs": 11, "IdempotentWrite": 12,
                       "CreateTokens": 13, "DescribeTokens": 14}
ACL_PERMISSION_NAMES = {"Deny": 2, "Allow": 3}


@dataclass(frozen=True, slots=True)
class ZkAcl:
    """One entry of a resource's ACL znode (codes as the wire protocol numbers them)."""

    principal: str
    permission: int
    operation: int
    host: str


def _name_of(table: dict[str, int], code: int) -> str:
    return next(name for name, value in table.items() if value == code)


def acl_path(resource_type: int, name: str, prefixed: bool) -> str:
    root = ACL_PREFIXED_ROOT if prefixed else ACL_LITERAL_ROOT
    return f"{root}/{_name_of(ACL_RESOURCE_NAMES, resource_type)}/{name}"


def encode_acls(acls: list[ZkAcl]) -> bytes:
    return _dumps({"version": 1, "acls": [
        {"principal": a.principal, "permissionType": _name_of(ACL_PERMISSION_NAMES, a.permission),
         "operation": _name_of(ACL_OPERATION_NAMES, a.operation), "host": a.host} for a in acls]})


def decode_acls(data: bytes) -> list[ZkAcl]:
    raw = _loads(data) if data else {}
    return [ZkAcl(str(a["principal"]), ACL_PERMISSION_NAMES[a["permissionType"]], ACL_OPERATION_NAMES[a["operation"]],
                  str(a["host"])) for a in raw.get("acls") or []]


def encode_acl_change(resource_type: int, name: str, prefixed: bool) -> bytes:
    type_name = _name_of(ACL_RESOURCE_ENUM_NAMES, resource_type)
    if not prefixed:
        return f"{type_name}:{name}".encode()
    return _dumps({"version": 1, "resourceType": type_name, "name": name, "patternType": "PREFIXED"})


def decode_acl_change(data: bytes, prefixed_root: bool) -> tuple[int, str, bool] | None:
    """(resource type, name, prefixed) of a change notification of /kafka-acl-changes (``TYPE:name``)
    or /kafka-acl-extended-changes (JSON), either spelling of the type; None for a type not known."""
    if prefixed_root:
        raw = json.loads(data)
        type_name, name = str(raw["resourceType"]), str(raw["name"])
        prefixed = str(raw.get("patternType", "")).upper() == "PREFIXED"
    else:
        type_name, _, name = data.decode().partition(":")
        prefixed = False
    resource_type = ACL_RESOURCE_NAMES.get(type_name, ACL_RESOURCE_ENUM_NAMES.get(type_name.upper()))
    return None if resource_type is None else (resource_type, name, prefixed)


# --- SCRAM credentials in /config/users/<user> -----------------------------------------------------
def encode_scram(salt: bytes, stored_key: bytes, server_key: bytes, iterations: int) -> str:
    """Kafka's ScramCredentialUtils.credentialToString."""
    def b64(value: bytes) -> str:
        return base64.b64encode(value).decode("ascii")
    return f"salt={b64(salt)},stored_key={b64(stored_key)},server_key={b64(server_key)},iterations={iterations}"


def decode_scram(text: str) -> tuple[bytes, bytes, bytes, int]:
    fields = dict(item.split("=", 1) for item in text.split(","))
    return (base64.b64decode(fields["salt"]), base64.b64decode(fields["stored_key"]),
            base64.b64decode(fields["server_key"]), int(fields["iterations"]))


# --- client quotas in /config/users, /config/clients, /config/ips ----------------------------------
# The quota keys Kafka's DynamicConfig.Client/User/Ip know, with their ConfigDef types: integer keys
# are stored as integers, the others as Java prints a double.
QUOTA_INTEGER_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "connection_creation_rate"})
QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage",
                        "controller_mutation_rate"})
IP_QUOTA_KEYS = frozenset({"connection_creation_rate"})


def sanitize_entity(name: str | None) -> str:
    """Kafka's Sanitizer.sanitize (URL-encoding as java.net.URLEncoder does, then ``*`` and the space
    as %2A and %20), so any user or client id is a valid znode name; None is ``<default>``."""
    if name is None:
        return DEFAULT_ENTITY
    return urllib.parse.quote(name, safe="").replace("~", "%7E")


def desanitize_entity(text: str) -> str | None:
    return None if text == DEFAULT_ENTITY else urllib.parse.unquote(text)


def quota_location(user: str | None | bool, client_id: str | None | bool, ip: str | None | bool) -> tuple[str, str]:
    """(config type, entity path) of a quota entity; False marks a type the entity does not name,
    None its <default>: ``users/<u>/clients/<c>`` for a (user, client-id) pair, as Kafka 3.9 keeps it."""
    if ip is not False:
        return "ips", sanitize_entity(ip if isinstance(ip, str) else None)
    if user is not False:
        path = sanitize_entity(user if isinstance(user, str) else None)
        if client_id is not False:
            path += "/clients/" + sanitize_entity(client_id if isinstance(client_id, str) else None)
        return "users", path
    return "clients", sanitize_entity(client_id if isinstance(client_id, str) else None)


def encode_quota_value(key: str, value: float) -> str:
    if key in QUOTA_INTEGER_KEYS:
        return str(int(value + 1e-6))
    return java_double(value)


def java_double(value: float) -> str:
    """``Double.toString``: plain digits with at least one decimal in [1e-3, 1e7), else 1.0E7 style."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    mantissa, _, exponent = f"{value:.17e}".partition("e")
    digits = repr(float(mantissa)) if float(mantissa) != int(float(mantissa)) else f"{float(mantissa):.1f}"
    return f"{digits}E{int(exponent)}"


# --- delegation tokens in /delegation_token/tokens/<tokenId> ---------------------------------------
TOKEN_INFO_VERSION = 3


def delegation_token_path(token_id: str) -> str:
    return f"{DELEGATION_TOKENS}/{token_id}"


def encode_delegation_token(token: DelegationTokenInfo) -> bytes:
    """DelegationTokenManagerZk.toJsonCompatibleMap: principals sanitized as Kafka's Sanitizer does."""
    return _dumps({"version": TOKEN_INFO_VERSION, "owner": sanitize_entity(token.owner),
                   "tokenRequester": sanitize_entity(token.requester),
                   "renewers": [sanitize_entity(r) for r in token.renewers],
                   "issueTimestamp": token.issue_ms, "maxTimestamp": token.max_ms,
                   "expiryTimestamp": token.expiry_ms, "tokenId": token.token_id})


def decode_delegation_token(data: bytes) -> DelegationTokenInfo | None:
    """DelegationTokenManagerZk.fromBytes: versions 1-3 (before 3 the requester is the owner)."""
    if not data:
        return None
    raw = _loads(data)
    version = int(raw["version"])
    if not 0 < version <= TOKEN_INFO_VERSION:
        raise ValueError(f"delegation token znode version {version} is not 1..{TOKEN_INFO_VERSION}")
    owner = urllib.parse.unquote_plus(raw["owner"])
    requester = urllib.parse.unquote_plus(raw["tokenRequester"]) if version >= 3 else owner
    return DelegationTokenInfo(str(raw["tokenId"]), owner, requester,
                               tuple(urllib.parse.unquote_plus(r) for r in raw["renewers"]),
                               int(raw["issueTimestamp"]), int(raw["maxTimestamp"]), int(raw["expiryTimestamp"]))
