"""A cluster broker's metadata: Kafka 3.9's ZkMetadataCache, behind grete's MetadataStore interface.

Reads come from what the controller sent in UpdateMetadata (the only way a ZooKeeper-mode broker
learns leaders, ISRs and live brokers) plus topic, broker and group configs read from ``/config/*``
and refreshed on ``/config/changes`` notifications. Changes go to ZooKeeper the way Kafka's
AdminZkClient writes them, and return once this broker's cache shows them (CreateTopics waits for
leaders, DeleteTopics for the topic to be gone), as Kafka's purgatories do. SCRAM credentials, ACLs,
client quotas and delegation tokens are security_cache.py's.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

from grete.broker.cluster.config_znodes import change_sequence, read_config, write_config
from grete.broker.cluster.security_cache import ZkSecurityCache, ZkTokenCache
from grete.broker.metrics.client_metrics_configs import CLIENT_METRICS
from grete.coordinator.metadata import (
    ChangeFeed,
    ChangeKind,
    DelegationTokenInfo,
    MetadataChange,
    MetadataStore,
    NoSuchTopic,
    PartitionMeta,
    QuotaEntity,
    ScramCredential,
    TopicExists,
    TopicMeta,
    new_topic_id,
)
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import BadVersionError, NodeExistsError, ZkClient
from grete.protocol.acls import AclBinding
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import UpdateMetadataRequest
from grete.protocol.topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)

LEADER_DURING_DELETE = -2
SECURITY_PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
WAIT_TIMEOUT_S = 30.0


class ZkMetadataCache:
    forwards = False  # a ZooKeeper-mode broker writes a new topic to ZooKeeper itself

    def __init__(self, zk_client: ZkClient, cluster_id: str, broker_id: int, *, acls: bool = False,
                 tokens: bool = False) -> None:
        self.zk = zk_client
        self.cluster_id = cluster_id
        self.broker_id = broker_id
        self.changes = ChangeFeed()
        self.controller_id = -1
        self.controller_epoch = -1
        self._brokers: dict[int, zk.BrokerInfo] = {}
        self._topics: dict[str, TopicMeta] = {}
        self._by_id: dict[uuid.UUID, TopicMeta] = {}
        self._topic_configs: dict[str, dict[str, str]] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._group_configs: dict[str, dict[str, str]] = {}  # by group id; none empty
        self._last_change = -1
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._config_reads: set[asyncio.Task[None]] = set()
        self.security = ZkSecurityCache(zk_client, self.changes, acls=acls)
        self.tokens = ZkTokenCache(zk_client, self.changes)
        # Delegation token znodes exist only where a secret key is (Kafka's DelegationTokenManagerZk.startup).
        self._with_tokens = tokens

    # --- start-up ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Read the broker configs, then follow /config/changes (the topic configs are read when a
        topic first shows up, before any partition of it opens)."""
        # The notifications after the newest one there now are applied: those before are in what is
        # read next (a change landing between the two is read twice, never missed).
        existing = await self.zk.children(zk.CONFIG_CHANGES)
        self._last_change = max((change_sequence(c) for c in existing), default=-1)
        for scope, entity in ((str(self.broker_id), str(self.broker_id)), ("", zk.DEFAULT_ENTITY)):
            self._broker_configs[scope] = await read_config(self.zk, "brokers", entity)
        # The broker was built before they were read: it takes them as it takes a change.
        self.changes.publish(MetadataChange(ChangeKind.BROKER_CONFIGS_CHANGED))
        self.zk.watch_children(zk.CONFIG_CHANGES, self._on_config_changes)
        for entity in await self.zk.children(zk.config_root(zk.GROUP_CONFIGS)):
            self._apply_group_configs(entity, await read_config(self.zk, zk.GROUP_CONFIGS, entity))
        await self.security.load()
        if self._with_tokens:
            await self.tokens.load()

    # --- reads ------------------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicMeta]:
        return self._topics

    def topic(self, name: str) -> TopicMeta | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def broker_configs(self, scope: str) -> dict[str, str]:
        return dict(self._broker_configs.get(scope, {}))

    def group_configs(self, group_id: str) -> dict[str, str]:
        return dict(self._group_configs.get(group_id, {}))

    def configured_groups(self) -> list[str]:
        return sorted(self._group_configs)

    def client_metrics(self, name: str) -> dict[str, str]:
        return {}

    def client_metrics_names(self) -> list[str]:
        return []  # client-metrics subscriptions are kept by the single node only

    def live_brokers(self) -> list[zk.BrokerInfo]:
        return [self._brokers[b] for b in sorted(self._brokers)]

    def broker(self, broker_id: int) -> zk.BrokerInfo | None:
        return self._brokers.get(broker_id)

    async def ensure_topic_configs(self, name: str) -> dict[str, str]:
        """The topic's overrides, read from /config/topics once (LeaderAndIsr needs them before it
        opens a log)."""
        if name not in self._topic_configs:
            self._topic_configs[name] = await read_config(self.zk, "topics", name)
            meta = self._topics.get(name)
            if meta is not None:
                meta.configs = dict(self._topic_configs[name])
        return self._topic_configs[name]

    async def _read_topic_configs(self, name: str, topic_id: uuid.UUID) -> None:
        """The overrides of a topic this broker hosts no replica of (no LeaderAndIsr reads them): its
        DescribeConfigs and min-ISR listings need them as Kafka 3.9's, which reads ZooKeeper."""
        try:
            configs = await read_config(self.zk, "topics", name)
        except Exception as exc:  # a background read: ZooKeeper gone, a bad znode; LeaderAndIsr reads again
            log.warning("the configs of topic %s could not be read from ZooKeeper: %s", name, exc)
            return
        meta = self._topics.get(name)
        if meta is None or meta.topic_id != topic_id or name in self._topic_configs:
            return  # deleted, created again, or read meanwhile (LeaderAndIsr, a change notification)
        self._topic_configs[name] = configs
        meta.configs = dict(configs)

    # --- UpdateMetadata ---------------------------------------------------------------------------
    def apply(self, request: UpdateMetadataRequest) -> None:
        """Kafka's ZkMetadataCache.updateMetadata: the live brokers and the controller are replaced,
        partition states upserted (leader -2: the topic is being deleted, drop it)."""
        self.controller_id = request.controller_id
        self.controller_epoch = request.controller_epoch
        joined = tuple(sorted({b.id for b in request.live_brokers} - self._brokers.keys()))
        self._brokers = {
            b.id: zk.BrokerInfo(b.id, tuple(zk.EndPoint(e.listener, e.host, e.port,
                                                       SECURITY_PROTOCOL_NAMES.get(e.security_protocol, "PLAINTEXT"))
                                            for e in b.endpoints), b.rack)
            for b in request.live_brokers}
        created: dict[str, list[int]] = {}
        added: dict[str, list[int]] = {}
        deleted: dict[str, TopicMeta] = {}
        for topic_state in request.topic_states:
            name = topic_state.topic_name
            for p in topic_state.partition_states:
                meta = self._topics.get(name)
                if p.leader == LEADER_DURING_DELETE:
                    if meta is not None and p.partition_index in meta.partitions:
                        deleted.setdefault(name, meta)
                        del meta.partitions[p.partition_index]
                    continue
                if meta is None or (topic_state.topic_id != ZERO_UUID and meta.topic_id != topic_state.topic_id):
                    if meta is not None:  # deleted and created again under the same name
                        self._drop(meta)
                    meta = TopicMeta(name, topic_state.topic_id, {}, dict(self._topic_configs.get(name, {})),
                                     name in INTERNAL_TOPICS)
                    self._topics[name] = meta
                    self._by_id[meta.topic_id] = meta
                    created[name] = []
                state = PartitionMeta(p.leader, p.leader_epoch, list(p.replicas), list(p.isr),
                                      list(p.offline_replicas), p.zk_version)
                if p.partition_index not in meta.partitions and name not in created:
                    added.setdefault(name, []).append(p.partition_index)
                elif name in created:
                    created[name].append(p.partition_index)
                meta.partitions[p.partition_index] = state
        for meta in deleted.values():
            if not meta.partitions:
                self._drop(meta)
                self.changes.publish(MetadataChange(ChangeKind.TOPIC_DELETED, meta, ()))
        for name, indexes in created.items():
            if name not in self._topic_configs:
                read = asyncio.ensure_future(self._read_topic_configs(name, self._topics[name].topic_id))
                self._config_reads.add(read)
                read.add_done_callback(self._config_reads.discard)
            self.changes.publish(MetadataChange(ChangeKind.TOPIC_CREATED, self._topics[name], tuple(sorted(indexes))))
        for name, indexes in added.items():
            self.changes.publish(MetadataChange(ChangeKind.PARTITIONS_ADDED, self._topics[name], tuple(sorted(indexes))))
        if joined:
            self.changes.publish(MetadataChange(ChangeKind.BROKERS_JOINED, brokers=joined))
        self._wake()

    def _drop(self, meta: TopicMeta) -> None:
        self._topics.pop(meta.name, None)
        self._by_id.pop(meta.topic_id, None)
        self._topic_configs.pop(meta.name, None)

    # --- waiting for the controller ---------------------------------------------------------------
    async def _wait_for(self, condition: Callable[[], bool], what: str) -> None:
        if condition():
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (condition, future)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(WAIT_TIMEOUT_S):
                await future
        except TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the controller has not {what} yet") from None
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def _wake(self) -> None:
        for condition, future in list(self._waiters):
            if not future.done() and condition():
                future.set_result(None)

    def _has_leaders(self, name: str, topic_id: uuid.UUID, count: int) -> bool:
        meta = self._topics.get(name)
        return (meta is not None and meta.topic_id == topic_id and len(meta.partitions) >= count
                and all(p.leader >= 0 for p in meta.partitions.values()))

    # --- changes (ZooKeeper writes, as AdminZkClient makes them) ----------------------------------
    async def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                           internal: bool = False, elected: bool = True) -> TopicMeta | None:
        if await self.zk.exists(zk.topic_path(name)) is not None:
            raise TopicExists(name)
        # The config first, then the topic (Kafka's order: the controller must find the config).
        await write_config(self.zk, "topics", name, configs, notify=False)
        topic_id = new_topic_id()
        try:
            await self.zk.create(zk.topic_path(name), zk.encode_topic(zk.TopicAssignment(assignment, topic_id)))
        except NodeExistsError:
            raise TopicExists(name) from None
        self._topic_configs[name] = dict(configs)
        if not elected:
            return None  # the controller elects its leaders when it can; nothing here waits for it
        await self._wait_for(lambda: self._has_leaders(name, topic_id, len(assignment)), f"elected leaders for {name}")
        return self._topics[name]

    async def delete_topic(self, name: str) -> TopicMeta:
        meta = self._topics.get(name)
        if meta is None:
            raise NoSuchTopic(name)
        try:
            await self.zk.create(zk.delete_topic_path(name))
        except NodeExistsError:
            pass  # already marked; wait for it as well
        topic_id = meta.topic_id
        await self._wait_for(lambda: (found := self._topics.get(name)) is None or found.topic_id != topic_id,
                             f"deleted {name}")
        return meta

    async def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMeta:
        while True:
            found = await self.zk.get(zk.topic_path(name))
            if found is None:
                raise NoSuchTopic(name)
            current = zk.decode_topic(found[0])
            current.partitions.update(assignment)
            try:
                await self.zk.set(zk.topic_path(name), zk.encode_topic(current), found[1].version)
                break
            except BadVersionError:
                continue  # changed under us: read again
        topic_id = current.topic_id or ZERO_UUID
        total = len(current.partitions)
        await self._wait_for(lambda: self._has_leaders(name, self._topics[name].topic_id if name in self._topics
                                                      else topic_id, total), f"elected leaders for {name}")
        return self._topics[name]

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        if name not in self._topics:
            raise NoSuchTopic(name)
        await write_config(self.zk, "topics", name, configs)
        self._apply_topic_configs(name, dict(configs))

    async def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        await write_config(self.zk, "brokers", scope or zk.DEFAULT_ENTITY, configs)
        self._broker_configs[scope] = dict(configs)
        self.changes.publish(MetadataChange(ChangeKind.BROKER_CONFIGS_CHANGED))

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """/config/groups/<group> (the id sanitized as Kafka sanitizes user and client ids) and a
        change notification, so the group's coordinator and its share partitions' leaders, on any
        broker, follow it."""
        entity = zk.sanitize_entity(group_id)
        await write_config(self.zk, zk.GROUP_CONFIGS, entity, configs)
        self._apply_group_configs(entity, dict(configs))

    async def set_client_metrics(self, name: str, configs: dict[str, str]) -> None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "CLIENT_METRICS config resources are kept by grete's single node only, not in a ZooKeeper cluster")

    async def validate_configs(self, resource_type: int, name: str, configs: dict[str, str]) -> None:
        """Written by this broker: only client metrics, which a ZooKeeper cluster does not keep, are refused."""
        if resource_type == CLIENT_METRICS:
            await self.set_client_metrics(name, configs)

    async def allocate_producer_ids(self, count: int, for_broker: int | None = None) -> int:
        """The next block of ids from /latest_producer_id_block, with a conditional write, so two
        brokers can never get the same block."""
        while True:
            found = await self.zk.get(zk.LATEST_PRODUCER_ID_BLOCK)
            if found is None:
                await self.zk.ensure_path(zk.LATEST_PRODUCER_ID_BLOCK)
                continue
            _start, end = zk.decode_producer_id_block(found[0])
            first = end + 1
            size = max(count, zk.PRODUCER_ID_BLOCK_SIZE)
            try:
                owner = self.broker_id if for_broker is None else for_broker  # AllocateProducerIds: the asker
                await self.zk.set(zk.LATEST_PRODUCER_ID_BLOCK,
                                  zk.encode_producer_id_block(owner, first, first + size - 1),
                                  found[1].version)
            except BadVersionError:
                continue
            return first

    # --- /config/changes --------------------------------------------------------------------------
    def _on_config_changes(self, children: list[str]) -> None:
        fresh = sorted((c for c in children if change_sequence(c) > self._last_change), key=change_sequence)
        if fresh:
            self._last_change = change_sequence(fresh[-1])
            asyncio.ensure_future(self._apply_changes(fresh))

    async def _apply_changes(self, names: list[str]) -> None:
        for child in names:
            found = await self.zk.get(f"{zk.CONFIG_CHANGES}/{child}")
            if found is None:
                continue  # purged already
            kind, entity = zk.decode_config_change(found[0])
            configs = await read_config(self.zk, kind, entity)
            if kind == "topics":
                self._apply_topic_configs(entity, configs)
            elif kind == "users" and "/" not in entity:
                self.security.apply_user_configs(entity, configs)
                self.security.apply_quota_configs(kind, entity, configs)
            elif kind in ("users", "clients", "ips"):
                self.security.apply_quota_configs(kind, entity, configs)
            elif kind == zk.GROUP_CONFIGS:
                self._apply_group_configs(entity, configs)
            elif kind == "brokers" and entity in (str(self.broker_id), zk.DEFAULT_ENTITY):
                self._broker_configs["" if entity == zk.DEFAULT_ENTITY else entity] = configs
                self.changes.publish(MetadataChange(ChangeKind.BROKER_CONFIGS_CHANGED))

    def _apply_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        meta = self._topics.get(name)
        if meta is None:  # not known here (yet, or any more): its creation reads them afresh
            self._topic_configs.pop(name, None)
            return
        self._topic_configs[name] = configs
        if meta.configs != configs:
            meta.configs = dict(configs)
            self.changes.publish(MetadataChange(ChangeKind.TOPIC_CONFIGS_CHANGED, meta, tuple(sorted(meta.partitions))))

    def _apply_group_configs(self, entity: str, configs: dict[str, str]) -> None:
        group_id = zk.desanitize_entity(entity)
        if group_id is None or configs == self._group_configs.get(group_id, {}):
            return
        if configs:
            self._group_configs[group_id] = configs
        else:
            self._group_configs.pop(group_id, None)
        self.changes.publish(MetadataChange(ChangeKind.GROUP_CONFIGS_CHANGED))

    # --- security: SCRAM credentials, ACLs, client quotas, delegation tokens (security_cache.py) ----
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.security.scram_credential(user, mechanism)

    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        return self.security.scram_credentials()

    async def set_scram_credential(self, user: str, mechanism: str, credential: ScramCredential | None) -> None:
        await self.security.set_scram_credential(user, mechanism, credential)

    def acls(self) -> frozenset[AclBinding]:
        return self.security.acls()

    async def add_acls(self, acls: list[AclBinding]) -> None:
        await self.security.add_acls(acls)

    async def remove_acls(self, acls: list[AclBinding]) -> None:
        await self.security.remove_acls(acls)

    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return self.security.client_quotas()

    async def alter_client_quotas(self, entity: QuotaEntity, changes: dict[str, float | None]) -> None:
        await self.security.alter_client_quotas(entity, changes)

    def delegation_tokens(self) -> dict[str, DelegationTokenInfo]:
        return self.tokens.delegation_tokens()

    async def set_delegation_token(self, token: DelegationTokenInfo) -> None:
        await self.tokens.set_delegation_token(token)

    async def remove_delegation_token(self, token_id: str) -> None:
        await self.tokens.remove_delegation_token(token_id)


def as_store(cache: ZkMetadataCache) -> MetadataStore:
    """The cache where a MetadataStore is wanted (also makes mypy hold it to the whole interface)."""
    return cache
