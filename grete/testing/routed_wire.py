""":class:`Wire`'s interface over a cluster: each request goes to the broker a Kafka client would send it
to (a partition's leader, a group's, transaction's or share partition's coordinator, else the first
broker), so that tests written against one broker's socket run unchanged against several.

Answers come back in the order their requests were sent, as on one connection: a test that pipelines
(a long poll, then another request) reads them as it would from a single broker."""

from __future__ import annotations

import copy
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiKey,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from grete.testing._wire import Wire

Address = tuple[str, int]
Connect = Callable[[str, int], Wire]

# Requests a client sends to the leader of the partitions they name.
LEADER_APIS = frozenset({ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH,
                         ApiKey.DELETE_RECORDS, ApiKey.DESCRIBE_PRODUCERS, ApiKey.SHARE_FETCH,
                         ApiKey.SHARE_ACKNOWLEDGE, ApiKey.WRITE_TXN_MARKERS})
GROUP_APIS = frozenset({ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT,
                        ApiKey.LEAVE_GROUP, ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS,
                        ApiKey.TXN_OFFSET_COMMIT, ApiKey.OFFSET_DELETE, ApiKey.CONSUMER_GROUP_HEARTBEAT,
                        ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE,
                        ApiKey.STREAMS_GROUP_HEARTBEAT, ApiKey.STREAMS_GROUP_DESCRIBE,
                        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, ApiKey.ALTER_SHARE_GROUP_OFFSETS,
                        ApiKey.DELETE_SHARE_GROUP_OFFSETS})
TXN_APIS = frozenset({ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN,
                      ApiKey.END_TXN, ApiKey.DESCRIBE_TRANSACTIONS})
SHARE_STATE_APIS = frozenset({ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE,
                              ApiKey.WRITE_SHARE_GROUP_STATE, ApiKey.DELETE_SHARE_GROUP_STATE,
                              ApiKey.READ_SHARE_GROUP_STATE_SUMMARY})
# Requests naming several groups, sent in parts to each one's coordinator as Kafka's Admin does:
# (the request's list of group ids, the answer's list)
BY_GROUP: dict[int, tuple[str, str]] = {ApiKey.DESCRIBE_GROUPS: ("groups", "groups"), ApiKey.CONSUMER_GROUP_DESCRIBE: ("group_ids", "groups"),
            ApiKey.SHARE_GROUP_DESCRIBE: ("group_ids", "groups"), ApiKey.STREAMS_GROUP_DESCRIBE: ("group_ids", "groups"),
            ApiKey.DELETE_GROUPS: ("groups_names", "results")}
# Config requests: a broker's own resources (BROKER, BROKER_LOGGER named by its id) go to that broker,
# as Kafka's Admin sends them; the answer's list
CONFIG_APIS: dict[int, str] = {ApiKey.DESCRIBE_CONFIGS: "results", ApiKey.ALTER_CONFIGS: "responses",
               ApiKey.INCREMENTAL_ALTER_CONFIGS: "responses"}
BROKER_RESOURCES = frozenset({4, 8})
GROUP, TRANSACTION, SHARE = 0, 1, 2  # FindCoordinator's key types
SETTLE_S = 15.0  # how long a new topic's leader or a coordinator may take to appear


class RoutedWire:
    """Connections to a cluster's brokers behind one :class:`Wire`-like object. ``connect`` opens
    (and, on a secured listener, authenticates) a connection the requests go over; ``lookup`` one
    that asks the cluster where they go (a principal allowed to describe every topic and group)."""

    def __init__(self, host: str, port: int, timeout: float = 30.0, connect: Connect | None = None,
                 lookup: Connect | None = None, client_id: str = Wire.client_id) -> None:
        self._connect: Connect = connect or (lambda h, p: Wire(h, p, timeout=timeout, client_id=client_id))
        self._bootstrap = (host, port)
        self._wires: dict[Address, Wire] = {}
        self._pending: deque[Wire | _Merged] = deque()
        self._first = self._wire(self._bootstrap)
        self._lookup = (lookup or self._connect)(host, port)
        self._names: dict[uuid.UUID, str] = {}
        self._sessions: dict[tuple[int, str], Address] = {}  # a session's broker, by API and member

    @property
    def sock(self) -> Any:
        return self._first.sock

    @property
    def client_id(self) -> str:
        return self._first.client_id

    @property
    def correlation_id(self) -> int:
        return self._first.correlation_id

    def send(self, request: Any, version: int) -> int:
        parts = self._split(request)
        if parts is not None:  # one request per coordinator, answered as one
            for address, part in parts:
                self._wire(address).send(part, version)
            self._pending.append(_Merged([self._wire(address) for address, _ in parts], _merged_field(request.API_KEY)))
            return self.correlation_id
        wire = self._wire(self._route(request))
        correlation_id = wire.send(request, version)
        self._pending.append(wire)
        return correlation_id

    def send_together(self, requests: list[tuple[Any, int]]) -> None:
        wires = [self._wire(self._route(request)) for request, _ in requests]
        if len(set(map(id, wires))) == 1:
            wires[0].send_together(requests)
            self._pending.extend(wires)
            return
        for (request, version), wire in zip(requests, wires, strict=True):
            wire.send(request, version)
            self._pending.append(wire)

    def receive(self, response_cls: Any, version: int) -> Any:
        return self._pending.popleft().receive(response_cls, version)

    def call(self, request: Any, response_cls: Any, version: int) -> Any:
        self.send(request, version)
        return self.receive(response_cls, version)

    def close(self) -> None:
        for wire in [*self._wires.values(), self._lookup]:
            wire.close()

    def _wire(self, address: Address) -> Wire:
        if address not in self._wires:
            self._wires[address] = self._connect(*address)
        return self._wires[address]

    # --- where a request goes ---------------------------------------------------------------

    def _split(self, request: Any) -> list[tuple[Address, Any]] | None:
        """A request a client sends in parts, else None: ListGroups and ListTransactions to every
        broker (each lists the groups or transactions it coordinates, as Kafka's Admin asks); requests naming several groups, and a batched AddPartitionsToTxn (v4+,
        as partition leaders send it), to each coordinator of the groups or transactions they name."""
        api = request.API_KEY
        if api in (ApiKey.LIST_GROUPS, ApiKey.LIST_TRANSACTIONS):
            return [(address, request) for _, address in sorted(self._brokers().items())]
        if api in BY_GROUP:
            field = BY_GROUP[api][0]
            return self._by_coordinator(request, field, GROUP, lambda group: str(group))
        if api == ApiKey.ADD_PARTITIONS_TO_TXN:
            return self._by_coordinator(request, "transactions", TRANSACTION, lambda txn: str(txn.transactional_id))
        if api in CONFIG_APIS:
            return self._parts(request, "resources", self._config_destination)
        return None

    def _config_destination(self, resource: Any) -> Address:
        if resource.resource_type not in BROKER_RESOURCES or not str(resource.resource_name).isdigit():
            return self._bootstrap
        return self._brokers().get(int(resource.resource_name), self._bootstrap)

    def _brokers(self) -> dict[int, Address]:
        """The live brokers' addresses on this listener, by id."""
        metadata = self._lookup.call(MetadataRequest(topics=[]), MetadataResponse, 12)
        return {b.node_id: (b.host, b.port) for b in metadata.brokers}

    def _by_coordinator(self, request: Any, field: str, key_type: int,
                        key: Callable[[Any], str]) -> list[tuple[Address, Any]] | None:
        return self._parts(request, field, lambda item: self._coordinator(key_type, key(item)))

    def _parts(self, request: Any, field: str,
               destination: Callable[[Any], Address]) -> list[tuple[Address, Any]] | None:
        """``request`` split by the destination of each item of its list ``field``; None when they
        all go to one broker (which :meth:`_route` finds again)."""
        items = getattr(request, field) or []
        by_address: dict[Address, list[Any]] = {}
        for item in items:
            by_address.setdefault(destination(item), []).append(item)
        if len(by_address) < 2:
            return None
        parts = []
        for address, some in by_address.items():
            part = copy.copy(request)
            setattr(part, field, some)
            parts.append((address, part))
        return parts

    def _route(self, request: Any) -> Address:
        api = request.API_KEY
        if api in CONFIG_APIS and request.resources:
            return self._config_destination(request.resources[0])
        if api in LEADER_APIS:
            return self._to_leader(api, request)
        if api in GROUP_APIS:
            group = _group_of(request)
            return self._bootstrap if group is None else self._coordinator(GROUP, group)
        if api in TXN_APIS:
            txn = _transaction_of(request)
            return self._bootstrap if txn is None else self._coordinator(TRANSACTION, txn)
        if api in SHARE_STATE_APIS:
            topic = request.topics[0] if request.topics else None
            if topic is None or not topic.partitions:
                return self._bootstrap
            key = f"{request.group_id}:{topic.topic_id}:{topic.partitions[0].partition}"
            return self._coordinator(SHARE, key)
        return self._bootstrap

    def _to_leader(self, api: int, request: Any) -> Address:
        """The first named partition's leader; a request naming none (a fetch session's or a share
        session's next request) goes where that session's previous one went."""
        session = (api, str(getattr(request, "member_id", "")))
        named = _first_partition(request)
        if named is None:
            return self._sessions.get(session, self._bootstrap)
        topic, index = named
        address = self._leader(topic, index) or self._bootstrap
        self._sessions[session] = address
        return address

    def _leader(self, topic: str | uuid.UUID, index: int) -> Address | None:
        deadline = time.monotonic() + SETTLE_S
        while True:
            metadata = self._lookup.call(MetadataRequest(topics=None), MetadataResponse, 12)
            brokers = {b.node_id: (b.host, b.port) for b in metadata.brokers}
            for t in metadata.topics:
                if t.name is not None:
                    self._names[t.topic_id] = t.name
            name = self._names.get(topic) if isinstance(topic, uuid.UUID) else topic
            found = next((t for t in metadata.topics if t.name == name), None)
            if found is None or found.error_code != ErrorCode.NONE:
                return None  # unknown or not described: the first broker answers the error
            leader = next((p.leader_id for p in found.partitions if p.partition_index == index), None)
            if leader is None:
                return None
            if leader in brokers:
                return brokers[leader]
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)

    def _coordinator(self, key_type: int, key: str) -> Address:
        deadline = time.monotonic() + SETTLE_S
        while True:
            answer = self._lookup.call(FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key]),
                                       FindCoordinatorResponse, 4)
            found = answer.coordinators[0]
            if found.error_code == ErrorCode.NONE:
                return found.host, found.port
            if found.error_code != ErrorCode.COORDINATOR_NOT_AVAILABLE or time.monotonic() > deadline:
                return self._bootstrap  # refused or invalid: the first broker answers the error
            time.sleep(0.1)


def _first_partition(request: Any) -> tuple[str | uuid.UUID, int] | None:
    """The first (topic name or id, partition index) a partition-carrying request names."""
    topics = getattr(request, "topic_data", None) or getattr(request, "topics", None)
    if topics is None and getattr(request, "markers", None):
        topics = request.markers[0].topics
    for topic in topics or ():
        name: str | uuid.UUID | None = (getattr(topic, "name", None) or getattr(topic, "topic", None)
                                         or getattr(topic, "topic_id", None))
        if name is None:
            continue
        indexes = getattr(topic, "partition_indexes", None)
        if indexes:
            return name, int(indexes[0])
        for partition in getattr(topic, "partition_data", None) or getattr(topic, "partitions", None) or ():
            for field in ("index", "partition_index", "partition"):
                if hasattr(partition, field):
                    return name, int(getattr(partition, field))
    return None


def _group_of(request: Any) -> str | None:
    for field in ("group_id", "groups", "groups_names", "group_ids"):
        value = getattr(request, field, None)
        if isinstance(value, str):
            if value:  # "" is also the default of a field the version does not have (OffsetFetch v8+)
                return value
        elif value:
            first = value[0]
            return first if isinstance(first, str) else getattr(first, "group_id", None)
    return None


def _transaction_of(request: Any) -> str | None:
    txn = getattr(request, "transactional_id", None) or getattr(request, "v3_and_below_transactional_id", None)
    if txn:
        return str(txn)
    for field in ("transactions", "transactional_ids"):
        value = getattr(request, field, None)
        if value:
            first = value[0]
            return first if isinstance(first, str) else getattr(first, "transactional_id", None)
    return None


def _merged_field(api_key: int) -> str:
    if api_key in BY_GROUP:
        return BY_GROUP[api_key][1]
    if api_key in CONFIG_APIS:
        return CONFIG_APIS[api_key]
    if api_key == ApiKey.LIST_GROUPS:
        return "groups"
    return "transaction_states" if api_key == ApiKey.LIST_TRANSACTIONS else "results_by_transaction"


def open_wire(bootstrap: str, timeout: float = 30.0, connect: Connect | None = None,
              lookup: Connect | None = None, client_id: str = Wire.client_id) -> Wire | RoutedWire:
    """A connection for raw requests to the broker(s) behind ``bootstrap`` ("host:port[,host:port...]"):
    one broker's socket, or a cluster's requests each sent where a client would send it."""
    addresses = [address.rsplit(":", 1) for address in bootstrap.split(",")]
    host, port = addresses[0][0], int(addresses[0][1])
    if len(addresses) == 1:
        return connect(host, port) if connect is not None else Wire(host, port, timeout, client_id)
    return RoutedWire(host, port, timeout, connect, lookup, client_id)


class _Merged:
    """The answers to a request sent in parts, received as one: their lists (groups, results)
    joined, the first error at the top."""

    def __init__(self, wires: list[Wire], field: str) -> None:
        self.wires = wires
        self.field = field

    def receive(self, response_cls: Any, version: int) -> Any:
        answers = [wire.receive(response_cls, version) for wire in self.wires]
        merged = answers[0]
        setattr(merged, self.field, [item for answer in answers for item in getattr(answer, self.field)])
        if hasattr(merged, "error_code"):
            merged.error_code = next((a.error_code for a in answers if a.error_code), 0)
        return merged
