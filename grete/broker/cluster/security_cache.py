"""A cluster broker's security metadata, as Kafka 3.9 keeps it in ZooKeeper: SCRAM credentials
(``/config/users/<user>``), ACLs (``/kafka-acl*``, followed through their change notifications),
client quotas (``/config/users``, ``/config/clients``, ``/config/ips``) and delegation tokens
(``/delegation_token``, as its DelegationTokenManagerZk). Part of ZkMetadataCache."""

from __future__ import annotations

import asyncio
import functools
import logging

from grete.broker.cluster.config_znodes import change_sequence, read_config, write_config
from grete.coordinator.metadata import (
    ChangeFeed,
    ChangeKind,
    DelegationTokenInfo,
    MetadataChange,
    QuotaEntity,
    ScramCredential,
    quota_entity,
)
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import BadVersionError, NodeExistsError, ZkClient
from grete.protocol.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType

log = logging.getLogger(__name__)

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


class ZkSecurityCache:
    def __init__(self, zk_client: ZkClient, changes: ChangeFeed, *, acls: bool) -> None:
        self.zk = zk_client
        self.changes = changes
        self._scram: dict[str, dict[str, ScramCredential]] = {}
        self._acls: dict[tuple[int, str, bool], frozenset[AclBinding]] = {}
        self._acl_changes_seen: dict[str, int] = {}
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        # ACL znodes exist only where an authorizer is configured (Kafka's AclAuthorizer makes them).
        self._with_acls = acls

    # --- SCRAM credentials (/config/users/<user>) -------------------------------------------------
    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._scram.get(user, {}).get(mechanism)

    def scram_credentials(self) -> dict[str, dict[str, ScramCredential]]:
        return {user: dict(mechanisms) for user, mechanisms in self._scram.items()}

    async def set_scram_credential(self, user: str, mechanism: str, credential: ScramCredential | None) -> None:
        """The user's entry in /config/users keeps its other keys (quotas live there too)."""
        configs = await read_config(self.zk, "users", user)
        if credential is None:
            configs.pop(mechanism, None)
        else:
            configs[mechanism] = zk.encode_scram(credential.salt, credential.stored_key, credential.server_key,
                                                 credential.iterations)
        await write_config(self.zk, "users", user, configs)
        self.apply_user_configs(user, configs)

    def apply_user_configs(self, user: str, configs: dict[str, str]) -> None:
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

    # --- ACLs (/kafka-acl*, /kafka-acl-changes, /kafka-acl-extended-changes) ----------------------
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

    async def _reload_acls(self, resource_type: int, name: str, prefixed: bool) -> None:
        found = await self.zk.get(zk.acl_path(resource_type, name, prefixed))
        entries = zk.decode_acls(found[0]) if found else []
        if entries:
            self._acls[(resource_type, name, prefixed)] = _bindings(resource_type, name, prefixed, entries)
        else:
            self._acls.pop((resource_type, name, prefixed), None)

    def _on_acl_changes(self, root: str, children: list[str]) -> None:
        seen = self._acl_changes_seen[root]
        fresh = sorted((c for c in children if change_sequence(c) > seen), key=change_sequence)
        if fresh:
            self._acl_changes_seen[root] = change_sequence(fresh[-1])
            asyncio.ensure_future(self._apply_acl_changes(root, fresh))

    async def _apply_acl_changes(self, root: str, names: list[str]) -> None:
        for child in names:
            found = await self.zk.get(f"{root}/{child}")
            if found is None:
                continue
            try:
                changed = zk.decode_acl_change(found[0], root == zk.ACL_EXTENDED_CHANGES)
            except (ValueError, KeyError, TypeError) as exc:
                log.error("ACL change notification %s/%s cannot be read: %s", root, child, exc)
                continue
            if changed is not None:
                await self._reload_acls(*changed)
        self.changes.publish(MetadataChange(ChangeKind.ACLS_CHANGED))

    # --- client quotas (/config/users, /config/users/<u>/clients, /config/clients, /config/ips) ---
    def client_quotas(self) -> dict[QuotaEntity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self._quotas.items()}

    async def alter_client_quotas(self, entity: QuotaEntity, changes: dict[str, float | None]) -> None:
        """Kafka 3.9's ZkAdminManager.alterClientQuotas: the entity's znode keeps its other keys
        (a user's SCRAM credentials live beside its quotas), then a change notification."""
        named: dict[str, str | None] = dict(entity)
        kind, path = zk.quota_location(named.get("user", False), named.get("client-id", False),
                                       named.get("ip", False))
        configs = await read_config(self.zk, kind, path)
        for key, value in changes.items():
            if value is None:
                configs.pop(key, None)
            else:
                configs[key] = zk.encode_quota_value(key, value)
        await write_config(self.zk, kind, path, configs)
        self.apply_quota_configs(kind, path, configs)

    def apply_quota_configs(self, kind: str, path: str, configs: dict[str, str]) -> None:
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
                self.apply_quota_configs("users", path, await read_config(self.zk, "users", path))
        for kind in ("clients", "ips"):
            for name in await self.zk.children(f"/config/{kind}"):
                self.apply_quota_configs(kind, name, await read_config(self.zk, kind, name))

    # --- start-up ---------------------------------------------------------------------------------
    async def load(self) -> None:
        users = await self.zk.children("/config/users")
        for user in users:
            configs = await read_config(self.zk, "users", user)
            self.apply_user_configs(user, configs)
            self.apply_quota_configs("users", user, configs)
        await self._load_quotas(users)
        if not self._with_acls:
            return
        # The notifications after the newest one there now are applied (Kafka's
        # ZkNodeChangeNotificationListener): those before are in the ACLs read below.
        for root in (zk.ACL_LITERAL_CHANGES, zk.ACL_EXTENDED_CHANGES):
            await self.zk.ensure_path(root)
            existing = await self.zk.children(root)
            self._acl_changes_seen[root] = max((change_sequence(c) for c in existing), default=-1)
        for prefixed, root in ((False, zk.ACL_LITERAL_ROOT), (True, zk.ACL_PREFIXED_ROOT)):
            for type_name in await self.zk.children(root):
                resource_type = zk.ACL_RESOURCE_NAMES.get(type_name)
                if resource_type is not None:
                    for name in await self.zk.children(f"{root}/{type_name}"):
                        await self._reload_acls(resource_type, name, prefixed)
        for root in (zk.ACL_LITERAL_CHANGES, zk.ACL_EXTENDED_CHANGES):
            self.zk.watch_children(root, functools.partial(self._on_acl_changes, root))


class ZkTokenCache:
    """Delegation tokens (/delegation_token), as Kafka 3.9's DelegationTokenManagerZk keeps them."""

    def __init__(self, zk_client: ZkClient, changes: ChangeFeed) -> None:
        self.zk = zk_client
        self.changes = changes
        self._tokens: dict[str, DelegationTokenInfo] = {}
        self._token_changes_seen = -1

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

    async def load(self) -> None:
        """Every token, then the notifications after the newest one seen (Kafka's loadCache and its
        ZkNodeChangeNotificationListener)."""
        for path in (zk.DELEGATION_TOKENS, zk.DELEGATION_TOKEN_CHANGES):
            await self.zk.ensure_path(path)
        existing = await self.zk.children(zk.DELEGATION_TOKEN_CHANGES)
        self._token_changes_seen = max((change_sequence(c) for c in existing), default=-1)
        for token_id in await self.zk.children(zk.DELEGATION_TOKENS):
            token = await self._read_token(token_id)
            if token is not None:
                self._tokens[token_id] = token
        self.changes.publish(MetadataChange(ChangeKind.DELEGATION_TOKENS_CHANGED))
        self.zk.watch_children(zk.DELEGATION_TOKEN_CHANGES, self._on_token_changes)

    def _on_token_changes(self, children: list[str]) -> None:
        fresh = sorted((c for c in children if change_sequence(c) > self._token_changes_seen), key=change_sequence)
        if fresh:
            self._token_changes_seen = change_sequence(fresh[-1])
            asyncio.ensure_future(self._apply_token_changes(fresh))

    async def _apply_token_changes(self, names: list[str]) -> None:
        for child in names:
            found = await self.zk.get(f"{zk.DELEGATION_TOKEN_CHANGES}/{child}")
            if found is not None:
                token_id = found[0].decode("utf-8")
                self._apply_token(token_id, await self._read_token(token_id))


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
