"""One registry of API handlers; it also builds the ApiVersions advertisement.

A handler module declares the versions it implements with ``@api(key, min, max)``. Nothing is
advertised that no module implements, and the advertised range is exactly the implemented one,
except where Kafka itself advertises more for client feature checks (Produce advertises min 0, as
Apache Kafka 4.x does for librdkafka; v0-2 are then answered by up-converting legacy message sets).

Start-up speed: importing every handler module (and its generated codecs) costs ~150 ms, so the
broker answers ApiVersions from ``handlers/manifest.py`` (key -> module and versions) and imports a
handler module on the first request of its API. ``python -m grete.broker.requests.registry`` rewrites the
manifest from the modules' own ``@api`` declarations; a test fails when the two disagree.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grete.broker.handlers as handler_package
from grete.broker.handlers.manifest import HANDLERS
from grete.protocol.messages import APIS, ApiKey

if TYPE_CHECKING:
    from grete.broker.requests.context import RequestContext

HandlerFn = Callable[["RequestContext[Any]", Any], Any | Awaitable[Any] | None]
PACKAGE = "grete.broker.handlers"


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    name: str
    min_version: int
    max_version: int
    advertised_min: int
    fn: HandlerFn
    request_cls: type
    response_cls: type
    module: str


_HANDLERS: dict[int, Handler] = {}


def api(api_key: int, min_version: int, max_version: int, *,
        advertised_min: int | None = None) -> Callable[[HandlerFn], HandlerFn]:
    """Register the decorated function as the handler of ``api_key`` for these versions."""
    info = APIS[api_key]
    if min_version < info.min_version or max_version > info.max_version:
        raise ValueError(f"{info.name}: codecs cover v{info.min_version}-{info.max_version}, "
                         f"handler claims v{min_version}-{max_version}")

    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in _HANDLERS and _HANDLERS[api_key].fn is not fn:
            raise ValueError(f"{info.name} registered twice")
        _HANDLERS[api_key] = Handler(api_key, info.name, min_version, max_version,
                                     min_version if advertised_min is None else advertised_min,
                                     fn, info.request, info.response, fn.__module__)
        return fn

    return register


class Handlers:
    """API key -> Handler, importing a handler module the first time its API is asked for."""

    def __init__(self, manifest: dict[int, tuple[str, int, int, int]]) -> None:
        self._manifest = manifest

    def get(self, api_key: int) -> Handler | None:
        handler = _HANDLERS.get(api_key)
        if handler is None and api_key in self._manifest:
            importlib.import_module(f"{PACKAGE}.{self._manifest[api_key][0]}")
            handler = _HANDLERS.get(api_key)
        return handler

    def __getitem__(self, api_key: int) -> Handler:
        handler = self.get(api_key)
        if handler is None:
            raise KeyError(api_key)
        return handler

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._manifest))

    def __len__(self) -> int:
        return len(self._manifest)

    def __contains__(self, api_key: object) -> bool:
        return api_key in self._manifest


def handlers() -> Handlers:
    return Handlers(HANDLERS)


# The controller-to-broker APIs of a ZooKeeper cluster (Kafka's "zkBroker" listener APIs): served
# and advertised only by a broker in one; elsewhere a request for them closes the connection, as a
# KRaft broker's does.
ZK_BROKER_APIS = frozenset({ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA,
                            ApiKey.CONTROLLED_SHUTDOWN, ApiKey.ALTER_PARTITION, ApiKey.ALLOCATE_PRODUCER_IDS})
# The metadata quorum's APIs a client may send: served and advertised by a node that runs a quorum
# (the embedded node), never by a ZooKeeper-mode broker, which closes the connection as Kafka 3.9's.
KRAFT_APIS = frozenset({ApiKey.DESCRIBE_QUORUM, ApiKey.UNREGISTER_BROKER})
# The voters' RPCs (Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot, a dynamic quorum's Add-, Remove- and
# UpdateRaftVoter, ControllerRegistration) and the KRaft brokers' (Envelope, BrokerRegistration,
# BrokerHeartbeat, AssignReplicasToDirs): served and advertised only by a voter of a quorum of several
# controllers (process.roles=controller); a quorum of one has no peer and no broker to answer.
RAFT_APIS = frozenset({ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH, ApiKey.FETCH_SNAPSHOT, ApiKey.ENVELOPE,
                       ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ADD_RAFT_VOTER,
                       ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER, ApiKey.CONTROLLER_REGISTRATION,
                       ApiKey.ASSIGN_REPLICAS_TO_DIRS})
# The voter changes a KRaft broker also serves and advertises, forwarding them to the active
# controller as Kafka 4's brokers do (``kafka-metadata-quorum --bootstrap-server ... add-controller``).
VOTER_CHANGE_APIS = frozenset({ApiKey.ADD_RAFT_VOTER, ApiKey.REMOVE_RAFT_VOTER})
# The admin requests a KRaft controller carries out for its brokers, sent in an Envelope (Kafka's
# ForwardingManager) or directly by tools with --bootstrap-controller: CreateTopics, DeleteTopics,
# CreateAcls, DeleteAcls, AlterConfigs, CreatePartitions, ElectLeaders, IncrementalAlterConfigs,
# AlterClientQuotas, AlterUserScramCredentials, DescribeQuorum, UpdateFeatures, Alter/List-
# PartitionReassignments, Create/Renew/ExpireDelegationToken, UnregisterBroker (all "forwardable" in Kafka's ApiKeys
# and served by its ControllerApis).
FORWARDED_APIS = frozenset({ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_ACLS,
                            ApiKey.DELETE_ACLS, ApiKey.ALTER_CONFIGS, ApiKey.CREATE_PARTITIONS,
                            ApiKey.CREATE_DELEGATION_TOKEN, ApiKey.RENEW_DELEGATION_TOKEN,
                            ApiKey.EXPIRE_DELEGATION_TOKEN, ApiKey.ELECT_LEADERS,
                            ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                            ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.ALTER_CLIENT_QUOTAS,
                            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_QUORUM,
                            ApiKey.UPDATE_FEATURES, ApiKey.UNREGISTER_BROKER})
# What a controller-only node serves and advertises: the quorum's APIs, what a client needs to
# reach them (ApiVersions, SASL, DescribeCluster for --bootstrap-controller), the reads tools make
# with --bootstrap-controller (DescribeAcls, DescribeConfigs, DescribeUserScramCredentials),
# Envelope and the requests it carries, and the brokers' AlterPartition and AllocateProducerIds.
CONTROLLER_APIS = frozenset({ApiKey.FETCH, ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.DESCRIBE_ACLS,
                             ApiKey.SASL_AUTHENTICATE, ApiKey.ALTER_PARTITION, ApiKey.ENVELOPE,
                             ApiKey.DESCRIBE_CLUSTER, ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.DESCRIBE_CONFIGS,
                             ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS}) | RAFT_APIS | FORWARDED_APIS
# A broker of a ZooKeeper cluster serves and advertises from Kafka 3.9's oldest version where Kafka 4
# removed older ones (KIP-896) and grete serves them there only: Fetch v0-3, whose records go out
# down-converted to the message formats before v2, ListOffsets v0 (offsets before a time, by
# segment), OffsetCommit v0 / OffsetFetch v0 (offsets kept in ZooKeeper), OffsetCommit v1 (its own
# commit timestamps), and versions whose semantics are their successors' (CreateTopics v0-1,
# DeleteTopics v0, DescribeConfigs v0, OffsetForLeaderEpoch v0-1, DescribeLogDirs v0, AlterReplicaLogDirs v0,
# the delegation-token APIs' v0, the ACL APIs' v0, WriteTxnMarkers v0). Elsewhere such a request
# closes the connection, as Kafka 4's.
ZK_MODE_MIN_VERSIONS: dict[int, int] = {
    ApiKey.FETCH: 0, ApiKey.LIST_OFFSETS: 0, ApiKey.CREATE_TOPICS: 0, ApiKey.DELETE_TOPICS: 0,
    ApiKey.DESCRIBE_CONFIGS: 0, ApiKey.OFFSET_FOR_LEADER_EPOCH: 0, ApiKey.DESCRIBE_LOG_DIRS: 0,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 0, ApiKey.OFFSET_COMMIT: 0, ApiKey.OFFSET_FETCH: 0,
    ApiKey.CREATE_DELEGATION_TOKEN: 0, ApiKey.RENEW_DELEGATION_TOKEN: 0, ApiKey.EXPIRE_DELEGATION_TOKEN: 0,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: 0, ApiKey.DESCRIBE_ACLS: 0, ApiKey.CREATE_ACLS: 0, ApiKey.DELETE_ACLS: 0,
    ApiKey.WRITE_TXN_MARKERS: 0}


def lowest_version(handler: Handler, zk_broker: bool) -> int:
    """The oldest version of ``handler``'s API this node serves and advertises."""
    return ZK_MODE_MIN_VERSIONS.get(handler.api_key, handler.advertised_min) if zk_broker else handler.advertised_min


# Served but never advertised: Kafka 4.3.1 answers the client-telemetry APIs (KIP-714) without
# advertising them unless a client-telemetry metrics reporter is configured, which grete has not.
UNADVERTISED_APIS = frozenset({ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, ApiKey.PUSH_TELEMETRY})

# grete's direct data path control APIs (docs/direct.md, specs/grete/): served and advertised only
# by a broker started with ``direct.transports`` set; elsewhere a request for them closes the
# connection as any unknown API key does.
DIRECT_APIS = frozenset({ApiKey.DIRECT_PRODUCE_ADDRESS, ApiKey.DIRECT_CONSUME_ADDRESS,
                         ApiKey.DIRECT_REPLICA_REGISTER})


def advertised_versions(zk_broker: bool = False, direct: bool = False, controller_only: bool = False,
                        voter_changes: bool = False) -> list[tuple[int, int, int]]:
    """(api_key, min, max) for the ApiVersions response, sorted by key, without imports."""
    if controller_only:
        return [(key, adv_min, hi)
                for key, (_, _lo, hi, adv_min) in sorted(HANDLERS.items()) if key in CONTROLLER_APIS]
    return [(key, ZK_MODE_MIN_VERSIONS.get(key, adv_min) if zk_broker else adv_min, hi)
            for key, (_, _lo, hi, adv_min) in sorted(HANDLERS.items())
            if (zk_broker or key not in ZK_BROKER_APIS) and not (zk_broker and key in KRAFT_APIS)
            and key not in UNADVERTISED_APIS
            and (direct or key not in DIRECT_APIS)
            and (key not in RAFT_APIS or (voter_changes and key in VOTER_CHANGE_APIS))]


def declared_handlers() -> dict[int, Handler]:
    """Import every handler module and return what their ``@api`` decorators declare."""
    for module in pkgutil.iter_modules(handler_package.__path__):
        if module.name != "manifest":
            importlib.import_module(f"{PACKAGE}.{module.name}")
    return dict(_HANDLERS)


def render_manifest(declared: dict[int, Handler]) -> str:
    lines = ['"""API key -> (handler module, min version, max version, advertised min).',
             "",
             "Written by ``python -m grete.broker.requests.registry`` from the ``@api`` declaration of each module;",
             'a test fails when it is out of date. Do not edit by hand."""',
             "",
             "HANDLERS: dict[int, tuple[str, int, int, int]] = {"]
    for key, h in sorted(declared.items()):
        lines.append(f"    {key}: ({h.module.rsplit('.', 1)[1]!r}, {h.min_version}, {h.max_version}, "
                     f"{h.advertised_min}),  # {h.name}")
    lines.append("}")
    return "\n".join(lines).replace("'", '"') + "\n"


if __name__ == "__main__":
    # Run as a script this file is __main__; the handlers register into the imported module.
    from grete.broker.requests import registry

    target = Path(registry.__file__).parents[1] / "handlers" / "manifest.py"
    target.write_text(registry.render_manifest(registry.declared_handlers()), encoding="utf-8")
    print(f"wrote {target}", file=sys.stderr)
