"""A cluster broker's metadata: Kafka 3.9's ZkMetadataCache, behind grete's MetadataStore interface.

Reads come from what the controller sent in UpdateMetadata (the only way a ZooKeeper-mode broker
learns leaders, ISRs and live brokers) plus topic, broker and group configs read from ``/config/*``
and refreshed on ``/config/changes`` notifications. Changes go to ZooKeeper the way Kafka's
AdminZkClient writes them, and return once this broker's cache shows them (CreateTopics waits for
leaders, DeleteTopics for the topic to be gone), as Kafka's purgatories do.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
from collections.abc import Callable

from grete.coordinator import zk_layout as zk
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
    quota_entity,
)
from grete.coordinator.zk_client import BadVersionError, NodeExistsError, ZkClient
from grete.protocol.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import UpdateMetadataRequest
from grete.protocol.topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)

LEADER_DURING_DELETE = -2
SECURITY_PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
WAIT_TIMEOUT_S = 30.0
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


class ZkMetadataCache:
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
        self._scram: dict[str, dict[str, ScramCredential]] = {}
        self._acls: dict[tuple[int, str, bool], frozenset[AclBinding]] = {}
        self._acl_changes_seen: dict[str, int] = {}
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._tokens: dict[str, DelegationTokenInfo] = {}
        self._token_changes_seen = -1
        # ACL znodes exist only where an authorizer is configured (Kafka's AclAuthorizer makes them),
        # the delegation token ones where a secret key is (Kafka's DelegationTokenManagerZk.startup).
        self._with_acls = acls
        self._with_tokens = tokens

    # --- start-up ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Read the broker configs, then follow /config/changes (the topic configs are read when a
        topic first shows up, before any partition of it opens)."""
        for scope, entity in ((str(self.broker_id), str(self.broker_id)), ("", zk.DEFAULT_ENTITY)):
            self._broker_configs[scope] = await self._read_config("brokers", entity)
        existing = await self.zk.children(zk.CONFIG_CHANGES)
        self._last_change = max((_sequence(c) for c in existing), default=-1)
        self.zk.watch_children(zk.CONFIG_CHANGES, self._on_config_changes)
        for entity in await self.zk.children(zk.config_root(zk.GROUP_CONFIGS)):
            self._apply_group_configs(entity, await self._read_config(zk.GROUP_CONFIGS, entity))
        await self._load_security()
        if self._with_tokens:
            await self._load_tokens()

    async def _read_config(self, kind: str, entity: str) -> dict[str, str]:
        found = await self.zk.get(zk.config_path(kind, entity))
        return zk.decode_config(found[0]) if found and found[0] else {}

    # --- reads -------------------------------------------------------------------------------
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
            self._topic_configs[name] = await self._read_config("topics", name)
            meta = self._topics.get(name)
            if meta is not None:
                meta.configs = dict(self._topic_configs[name])
        return self._topic_configs[name]

    # --- UpdateMetadata ----------------------------------------------------------------------
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
                if meta is None or (topic_state.topic_id != uuid.UUID(int=0) and meta.topic_id != topic_state.topic_id):
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

    # --- waiting for the controller -------------------------------------------------------------
    async def _wait_for(self, condition: Callable[[], bool], what: str) -> None:
        if condition():
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (condition, future)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(future, WAIT_TIMEOUT_S)
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

    # --- changes (ZooKeeper writes, as AdminZkClient makes them) ---------------------------------
    async def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                           internal: bool = False) -> TopicMeta:
        if await self.zk.exists(zk.topic_path(name)) is not None:
            raise TopicExists(name)
        # The config first, then the topic (Kafka's order: the controller must find the config).
        await self._write_config("topics", name, configs, notify=False)
        topic_id = new_topic_id()
        try:
            await self.zk.create(zk.topic_path(name), zk.encode_topic(zk.TopicAssignment(assignment, topic_id)))
        except NodeExistsError:
            raise TopicExists(name) from None
        self._topic_configs[name] = dict(configs)
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
        topic_id = current.topic_id or uuid.UUID(int=0)
        total = len(current.partitions)
        await self._wait_for(lambda: self._has_leaders(name, self._topics[name].topic_id if name in self._topics
                                                      else topic_id, total), f"elected leaders for {name}")
        return self._topics[name]

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        if name not in self._topics:
            raise NoSuchTopic(name)
        await self._write_config("topics", name, configs)
        self._apply_topic_configs(name, dict(configs))

    async def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        await self._write_config("brokers", scope or zk.DEFAULT_ENTITY, configs)
        self._broker_configs[scope] = dict(configs)
        self.changes.publish(MetadataChange(ChangeKind.BROKER_CONFIGS_CHANGED))

    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        """/config/groups/<group> (the id sanitized as Kafka sanitizes user and client ids) and a
        change notification, so the group's coordinator and its share partitions' leaders, on any
        broker, follow it."""
        entity = zk.sanitize_entity(group_id)
        await self._write_config(zk.GROUP_CONFIGS, entity, configs)
        self._apply_group_configs(entity, dict(configs))

    async def set_client_metrics(self, name: str, configs: dict[str, str]) -> None:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "CLIENT_METRICS config resources are kept by grete's single node only, not in a ZooKeeper cluster")

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

    async def _write_config(self, kind: str, entity: str, configs: dict[str, str], *, notify: bool = True) -> None:
        path = zk.config_path(kind, entity)
        data = zk.encode_config(configs)
        try:
            await self.zk.create(path, data, makepath=True)
        except NodeExistsError:
            await self.zk.set(path, data)
        if notify:
            await self.zk.create(f"{zk.CONFIG_CHANGES}/{zk.CONFIG_CHANGE_PREFIX}",
                                 zk.encode_config_change(kind, entity), sequence=True)

    # --- SCRAM credentials (/config/users/<user>) and ACLs (/kafka-acl*), as Kafka 3.9 keeps them --
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._scram.get(user, {}).get(mechanism)

    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        return {user: dict(mechanisms) for user, mechanisms in self._scram.items()}

    async def set_scram_credential(self, user: str, mechanism: str, credential: ScramCredential | None) -> None:
        """The user's entry in /config/users keeps its other keys (quotas live there too)."""
        configs = await self._read_config("users", user)
        if credential is None:
            configs.pop(mechanism, None)
        else:
            configs[mechanism] = zk.encode_scram(credential.salt, credential.stored_key, credential.server_key,
                                                 credential.iterations)
        await self._write_config("users", user, configs)
        self._apply_user_configs(user, configs)

    def _apply_user_configs(self, user: str, configs: dict[str, str]) -> None:
        found = {}
        for mechanism in SCRAM_MECHANISMS:
            if mechanism in configs:
                salt, stored, server, iterations = zk.decode_scram(configs[mechanism])
                found[mechanism] = ScramCredential(salt, stored, server, iterations)
        if found:
            self._scram[user] = found
        else:
            self._scram.pop(user, None)
        self.changes.publish(MetadataChange(ChangeKind.SCRAM_CREDENTIALS_CHANGED))

    def acls(self) -> frozenset[AclBinding]:
        return frozenset(b for bindings in self._acls.values() for b in bindings)

    async def add_acls(self, acls: list[AclBinding]) -> None:
        await self._change_acls(acls, add=True)

    async def remove_acls(self, acls: list[AclBinding]) -> None:
        await self._change_acls(acls, add=False)

    async def _change_acls(self, acls: list[AclBinding], *, add: bool) -> None:
        """Per resource, a conditional rewrite of its znode (Kafka's AclAuthorizer), then a change
        notification every broker's authorizer follows."""
        by_resource: dict[tuple[int, str, bool], list[AclBinding]] = {}
        for acl in acls:
            key = (int(acl.resource_type), acl.resource_name, acl.pattern_type == PatternType.PREFIXED)
            by_resource.setdefault(key, []).append(acl)
        for (resource_type, name, prefixed), bindings in by_resource.items():
            path = zk.acl_path(resource_type, name, prefixed)
            while True:
                found = await self.zk.get(path)
                current = zk.decode_acls(found[0]) if found else []
                entries = [zk.ZkAcl(b.principal, int(b.permission), int(b.operation), b.host) for b in bindings]
                wanted = ([*current, *(e for e in entries if e not in current)] if add
                          else [e for e in current if e not in entries])
                try:
                    if found is None:
                        await self.zk.create(path, zk.encode_acls(wanted), makepath=True)
                    elif wanted:
                        await self.zk.set(path, zk.encode_acls(wanted), found[1].version)
                    else:
                        await self.zk.delete(path, found[1].version)
                    break
                except (BadVersionError, NodeExistsError):
                    continue  # changed under us: read it again
            root = zk.ACL_EXTENDED_CHANGES if prefixed else zk.ACL_LITERAL_CHANGES
            await self.zk.create(f"{root}/{zk.ACL_CHANGE_PREFIX}", zk.encode_acl_change(resource_type, name, prefixed),
                                 sequence=True, makepath=True)
            self._acls[(resource_type, name, prefixed)] = _bindings(resource_type, name, prefixed, wanted)
        self.changes.publish(MetadataChange(ChangeKind.ACLS_CHANGED))

    # --- client quotas (/config/users, /config/users/<u>/clients, /config/clients, /config/ips) ----
    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    async def alter_client_quotas(self, entity: QuotaEntity, changes: dict[str, float | None]) -> None:
        """Kafka 3.9's ZkAdminManager.alterClientQuotas: the entity's znode keeps its other keys
        (a user's SCRAM credentials live beside its quotas), then a change notification."""
        named: dict[str, str | None] = dict(entity)
        kind, path = zk.quota_location(named.get("user", False), named.get("client-id", False),
                                       named.get("ip", False))
        configs = await self._read_config(kind, path)
        for key, value in changes.items():
            if value is None:
                configs.pop(key, None)
            else:
                configs[key] = zk.encode_quota_value(key, value)
        await self._write_config(kind, path, configs)
        self._apply_quota_configs(kind, path, configs)

    def _apply_quota_configs(self, kind: str, path: str, configs: dict[str, str]) -> None:
        entity = _quota_entity_of(kind, path)
        keys = zk.IP_QUOTA_KEYS if kind == "ips" else zk.QUOTA_KEYS
        values = {key: float(value) for key, value in configs.items() if key in keys}
        if values == self._quotas.get(entity, {}):
            return
        if values:
            self._quotas[entity] = values
        else:
            self._quotas.pop(entity, None)
        self.changes.publish(MetadataChange(ChangeKind.CLIENT_QUOTAS_CHANGED))

    async def _load_quotas(self, users: list[str]) -> None:
        for user in users:
            for client in await self.zk.children(f"/config/users/{user}/clients"):
                path = f"{user}/clients/{client}"
                self._apply_quota_configs("users", path, await self._read_config("users", path))
        for kind in ("clients", "ips"):
            for name in await self.zk.children(f"/config/{kind}"):
                self._apply_quota_configs(kind, name, await self._read_config(kind, name))

    async def _load_security(self) -> None:
        users = await self.zk.children("/config/users")
        for user in users:
            configs = await self._read_config("users", user)
            self._apply_user_configs(user, configs)
            self._apply_quota_configs("users", user, configs)
        await self._load_quotas(users)
        if not self._with_acls:
            return
        for prefixed, root in ((False, zk.ACL_LITERAL_ROOT), (True, zk.ACL_PREFIXED_ROOT)):
            for type_name in await self.zk.children(root):
                resource_type = zk.ACL_RESOURCE_NAMES.get(type_name)
                if resource_type is not None:
                    for name in await self.zk.children(f"{root}/{type_name}"):
                        await self._reload_acls(resource_type, name, prefixed)
        for root in (zk.ACL_LITERAL_CHANGES, zk.ACL_EXTENDED_CHANGES):
            await self.zk.ensure_path(root)
            self.zk.watch_children(root, functools.partial(self._on_acl_changes, root))

    async def _reload_acls(self, resource_type: int, name: str, prefixed: bool) -> None:
        found = await self.zk.get(zk.acl_path(resource_type, name, prefixed))
        entries = zk.decode_acls(found[0]) if found else []
        if entries:
            self._acls[(resource_type, name, prefixed)] = _bindings(resource_type, name, prefixed, entries)
        else:
            self._acls.pop((resource_type, name, prefixed), None)

    def _on_acl_changes(self, root: str, children: list[str]) -> None:
        seen = self._acl_changes_seen.setdefault(root, -1)
        fresh = sorted((c for c in children if _sequence(c) > seen), key=_sequence)
        if fresh:
            self._acl_changes_seen[root] = _sequence(fresh[-1])
            if seen >= 0:  # the first call lists what start-up already loaded
                asyncio.ensure_future(self._apply_acl_changes(root, fresh))

    async def _apply_acl_changes(self, root: str, names: list[str]) -> None:
        for child in names:
            found = await self.zk.get(f"{root}/{child}")
            if found is None:
                continue
            if root == zk.ACL_LITERAL_CHANGES:
                type_name, _, name = found[0].decode().partition(":")
                prefixed = False
            else:
                raw = json.loads(found[0])
                type_name, name, prefixed = raw["resourceType"], raw["name"], raw.get("patternType") == "PREFIXED"
            resource_type = zk.ACL_RESOURCE_NAMES.get(type_name)
            if resource_type is not None:
                await self._reload_acls(resource_type, name, prefixed)
        self.changes.publish(MetadataChange(ChangeKind.ACLS_CHANGED))

    # --- delegation tokens (/delegation_token), as Kafka 3.9's DelegationTokenManagerZk --------------
    def delegation_tokens(self) -> dict[str, DelegationTokenInfo]:
        return self._tokens

    async def set_delegation_token(self, token: DelegationTokenInfo) -> None:
        """setOrCreateDelegationToken, then a token_change notification every broker follows."""
        path, data = zk.delegation_token_path(token.token_id), zk.encode_delegation_token(token)
        try:
            await self.zk.create(path, data, makepath=True)
        except NodeExistsError:
            await self.zk.set(path, data)
        self._apply_token(token.token_id, token)
        await self._notify_token_change(token.token_id)

    async def remove_delegation_token(self, token_id: str) -> None:
        await self.zk.delete(zk.delegation_token_path(token_id), recursive=True)
        self._apply_token(token_id, None)
        await self._notify_token_change(token_id)

    async def _notify_token_change(self, token_id: str) -> None:
        await self.zk.create(f"{zk.DELEGATION_TOKEN_CHANGES}/{zk.DELEGATION_TOKEN_CHANGE_PREFIX}",
                             token_id.encode("utf-8"), sequence=True, makepath=True)

    def _apply_token(self, token_id: str, token: DelegationTokenInfo | None) -> None:
        if token is None:
            if self._tokens.pop(token_id, None) is None:
                return
        elif self._tokens.get(token_id) == token:
            return
        else:
            self._tokens = {**self._tokens, token_id: token}
        self.changes.publish(MetadataChange(ChangeKind.DELEGATION_TOKENS_CHANGED))

    async def _read_token(self, token_id: str) -> DelegationTokenInfo | None:
        found = await self.zk.get(zk.delegation_token_path(token_id))
        try:
            return zk.decode_delegation_token(found[0]) if found else None
        except (ValueError, KeyError, TypeError) as exc:
            log.error("delegation token znode %s cannot be read: %s", token_id, exc)
            return None

    async def _load_tokens(self) -> None:
        """Every token, then the notifications after the newest one seen (Kafka's loadCache and its
        ZkNodeChangeNotificationListener)."""
        for path in (zk.DELEGATION_TOKENS, zk.DELEGATION_TOKEN_CHANGES):
            await self.zk.ensure_path(path)
        existing = await self.zk.children(zk.DELEGATION_TOKEN_CHANGES)
        self._token_changes_seen = max((_sequence(c) for c in existing), default=-1)
        for token_id in await self.zk.children(zk.DELEGATION_TOKENS):
            token = await self._read_token(token_id)
            if token is not None:
                self._tokens[token_id] = token
        self.changes.publish(MetadataChange(ChangeKind.DELEGATION_TOKENS_CHANGED))
        self.zk.watch_children(zk.DELEGATION_TOKEN_CHANGES, self._on_token_changes)

    def _on_token_changes(self, children: list[str]) -> None:
        fresh = sorted((c for c in children if _sequence(c) > self._token_changes_seen), key=_sequence)
        if fresh:
            self._token_changes_seen = _sequence(fresh[-1])
            asyncio.ensure_future(self._apply_token_changes(fresh))

    async def _apply_token_changes(self, names: list[str]) -> None:
        for child in names:
            found = await self.zk.get(f"{zk.DELEGATION_TOKEN_CHANGES}/{child}")
            if found is not None:
                token_id = found[0].decode("utf-8")
                self._apply_token(token_id, await self._read_token(token_id))

    # --- /config/changes -------------------------------------------------------------------------
    def _on_config_changes(self, children: list[str]) -> None:
        fresh = sorted((c for c in children if _sequence(c) > self._last_change), key=_sequence)
        if fresh:
            self._last_change = _sequence(fresh[-1])
            asyncio.ensure_future(self._apply_changes(fresh))

    async def _apply_changes(self, names: list[str]) -> None:
        for child in names:
            found = await self.zk.get(f"{zk.CONFIG_CHANGES}/{child}")
            if found is None:
                continue  # purged already
            kind, entity = zk.decode_config_change(found[0])
            configs = await self._read_config(kind, entity)
            if kind == "topics":
                self._apply_topic_configs(entity, configs)
            elif kind == "users" and "/" not in entity:
                self._apply_user_configs(entity, configs)
                self._apply_quota_configs(kind, entity, configs)
            elif kind in ("users", "clients", "ips"):
                self._apply_quota_configs(kind, entity, configs)
            elif kind == zk.GROUP_CONFIGS:
                self._apply_group_configs(entity, configs)
            elif kind == "brokers" and entity in (str(self.broker_id), zk.DEFAULT_ENTITY):
                self._broker_configs["" if entity == zk.DEFAULT_ENTITY else entity] = configs
                self.changes.publish(MetadataChange(ChangeKind.BROKER_CONFIGS_CHANGED))

    def _apply_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        self._topic_configs[name] = configs
        meta = self._topics.get(name)
        if meta is not None and meta.configs != configs:
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


def _bindings(resource_type: int, name: str, prefixed: bool, entries: list[zk.ZkAcl]) -> frozenset[AclBinding]:
    return frozenset(AclBinding(ResourceType(resource_type), name,
                                PatternType.PREFIXED if prefixed else PatternType.LITERAL, e.principal, e.host,
                                AclOperation(e.operation), AclPermissionType(e.permission)) for e in entries)


def _quota_entity_of(kind: str, path: str) -> QuotaEntity:
    """The entity a quota znode holds, from its config type and sanitized path."""
    if kind == "ips":
        return quota_entity({"ip": zk.desanitize_entity(path)})
    if kind == "clients":
        return quota_entity({"client-id": zk.desanitize_entity(path)})
    user, _, client = path.partition("/clients/")
    if client:
        return quota_entity({"user": zk.desanitize_entity(user), "client-id": zk.desanitize_entity(client)})
    return quota_entity({"user": zk.desanitize_entity(user)})


def _sequence(child: str) -> int:
    digits = child.rsplit("_", 1)[-1]
    return int(digits) if digits.isdigit() else -1



def as_store(cache: ZkMetadataCache) -> MetadataStore:
    """The cache where a MetadataStore is wanted (also makes mypy hold it to the whole interface)."""
    return cache
