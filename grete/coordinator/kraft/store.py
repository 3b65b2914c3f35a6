"""Metadata kept as KRaft keeps it: every change a batch of metadata records in the quorum's log.

A change is turned into the records Kafka 4.3.1's controller writes for it (a topic is a
TopicRecord, a PartitionRecord per partition and a ConfigRecord per override; a deletion one
RemoveTopicRecord; a config change ConfigRecords with null values for removed keys; ...), appended
and committed as one batch, applied to the in-memory state exactly as a restart replays it, and
only then published. A restart reads the log from its start, so state and log cannot disagree.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from grete.coordinator.kraft.quorum import SingleVoterQuorum
from grete.coordinator.metadata import (
    ChangeKind,
    DelegationTokenInfo,
    MetadataChange,
    MetadataState,
    NoSuchTopic,
    PartitionMeta,
    QuotaEntity,
    ScramCredential,
    TopicExists,
    TopicMeta,
    new_topic_id,
)
from grete.protocol.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from grete.protocol.codec import ZERO_UUID, Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import (
    AccessControlEntryRecord,
    ClearElrRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from grete.protocol.metadata_frame import encode_metadata_record
from grete.protocol.topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)

METADATA_VERSION = "metadata.version"
ELR_FEATURE = "eligible.leader.replicas.version"
MIN_ISR = "min.insync.replicas"
# ConfigResource.Type codes as ConfigRecord carries them.
TOPIC_RESOURCE, BROKER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE = 2, 4, 16, 32
# ScramMechanism.type codes, as UserScramCredentialRecord carries them.
SCRAM_MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
_MECHANISM_NAMES = {code: name for name, code in SCRAM_MECHANISM_TYPES.items()}


_P = ParamSpec("_P")
_T = TypeVar("_T")
_S = TypeVar("_S", bound="KRaftMetadataStore")


def _one_at_a_time(change: Callable[Concatenate[_S, _P], Coroutine[Any, Any, _T]]
                   ) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _T]]:
    """A change is decided on the applied state and written after an await: two at once would both
    pass their checks (two CreateTopics of one name through two brokers made two topics of it). One
    at a time, each sees what the last one committed, as Kafka's controller decides each on its one
    thread."""
    async def serialized(store: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        async with store._writes:
            return await change(store, *args, **kwargs)
    functools.update_wrapper(serialized, change)
    return serialized

class KRaftMetadataStore(MetadataState):
    """The metadata store of a KRaft node whose quorum is itself (the embedded node, a combined
    node of one); the same interface as every other store (grete.coordinator.metadata)."""

    def __init__(self, quorum: SingleVoterQuorum, cluster_id: str) -> None:
        self._init_state(cluster_id)
        self.quorum = quorum
        for offset, record, _version in quorum.replay():
            self._apply(record, offset)
        quorum.elect()

    def reset(self) -> None:
        """Forget the whole state (a snapshot is to replace it); the change feed's subscribers stay."""
        changes = self.changes
        self._init_state(self.cluster_id)
        self.changes = changes

    def _init_state(self, cluster_id: str) -> None:
        MetadataState.__init__(self)
        self.cluster_id = cluster_id
        self._writes = asyncio.Lock()  # one change decided at a time: see _one_at_a_time
        self._acl_ids: dict[AclBinding, uuid.UUID] = {}
        self._configs_by_resource: dict[tuple[int, str], dict[str, str]] = {}
        self.records_applied = 0
        self.applied_offset = -1  # of the last record applied: KRaft's finalized features epoch

    # --- committing -------------------------------------------------------------------------------
    async def _commit(self, records: Sequence[Message]) -> None:
        """Append ``records`` as one batch (durable when this returns), then apply them. A failed
        disk is KAFKA_STORAGE_ERROR naming the log, and the state is left as it was."""
        self._write(records)

    def _write(self, records: Sequence[Message]) -> None:
        if not records:
            return
        values = [encode_metadata_record(record) for record in records]
        try:
            appended = self.quorum.append(values)
        except OSError as exc:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"could not write {self.quorum.partition_dir}: {exc.strerror or exc}") from None
        for index, record in enumerate(records):
            self._apply(record, appended.first_offset + index)
        if self.quorum.snapshot_due:
            try:
                self.snapshot()
            except OSError as exc:  # the change itself is durable; the next one tries again
                log.error("could not write a metadata snapshot in %s: %s", self.quorum.partition_dir,
                          exc.strerror or exc)

    def snapshot(self) -> None:
        """The whole state as a snapshot, so a restart replays it and the log after it only."""
        self.quorum.snapshot([encode_metadata_record(record) for record in self.state_records()])

    def state_records(self, partition_record: Callable[[PartitionRecord], None] = lambda _record: None) -> list[Message]:
        """The records that rebuild the whole state (a snapshot's)."""
        return _state_records(self, acl_ids=self._acl_ids, partition_record=partition_record)

    # --- applying (live and on replay) -------------------------------------------------------------
    def _apply(self, record: Message, offset: int) -> None:
        self.records_applied += 1
        self.applied_offset = offset
        if isinstance(record, TopicRecord):
            meta = TopicMeta(record.name, record.topic_id, {}, {}, record.name in INTERNAL_TOPICS)
            self._topics[meta.name] = meta
            self._by_id[meta.topic_id] = meta
            meta.configs = self._configs_by_resource.setdefault((TOPIC_RESOURCE, meta.name), {})
        elif isinstance(record, PartitionRecord):
            topic = self._by_id[record.topic_id]
            topic.partitions[record.partition_id] = PartitionMeta(
                record.leader, record.leader_epoch, list(record.replicas), list(record.isr),
                partition_epoch=record.partition_epoch, elr=list(record.eligible_leader_replicas or ()),
                last_known_elr=list(record.last_known_elr or ()), directories=list(record.directories or ()))
        elif isinstance(record, PartitionChangeRecord):
            self._apply_partition_change(record)
        elif isinstance(record, ClearElrRecord):
            self._clear_elrs(record.topic_name)
        elif isinstance(record, RemoveTopicRecord):
            removed = self._by_id.pop(record.topic_id)
            del self._topics[removed.name]
            self._configs_by_resource.pop((TOPIC_RESOURCE, removed.name), None)
        elif isinstance(record, ConfigRecord):
            self._apply_config(record)
        else:
            self._apply_security(record)

    def _apply_partition_change(self, record: PartitionChangeRecord) -> None:
        topic = self._by_id.get(record.topic_id)
        part = topic.partitions.get(record.partition_id) if topic is not None else None
        if part is None:
            # Kafka's controller never writes one; a log that has it (a change decided as its topic
            # was being removed) must not stop every node replaying it (Kafka's brokers log it too).
            log.error("metadata: a PartitionChangeRecord for partition %d of topic id %s, which does not exist: "
                      "ignored", record.partition_id, record.topic_id)
            return
        # Kafka's conventions: a leader of -2 is "no change"; a null list is "no change".
        if record.leader != -2:
            part.leader = record.leader
            part.leader_epoch += 1
        if record.isr is not None:
            part.isr = list(record.isr)
        if record.directories is not None:
            part.directories = list(record.directories)
        elif record.replicas is not None and part.directories:
            # New replicas without directories: theirs unknown, the others' kept (Kafka's merge).
            known = dict(zip(part.replicas, part.directories, strict=False))
            part.directories = [known.get(r, ZERO_UUID) for r in record.replicas]
        if record.replicas is not None:
            part.replicas = list(record.replicas)
        if record.eligible_leader_replicas is not None:
            part.elr = list(record.eligible_leader_replicas)
        if record.last_known_elr is not None:
            part.last_known_elr = list(record.last_known_elr)
        part.partition_epoch += 1

    def _clear_elrs(self, topic_name: str) -> None:
        """ClearElrRecord: the ELR and LastKnownElr of one topic's partitions (every topic's for an
        empty name) emptied, each such partition's epoch moved on, as Kafka's controller and brokers
        replay it (ReplicationControlManager.removeTopicElrs)."""
        topics = self._topics.values() if not topic_name else [t for t in (self._topics.get(topic_name),) if t]
        for topic in topics:
            for part in topic.partitions.values():
                if part.elr or part.last_known_elr:
                    part.elr, part.last_known_elr = [], []
                    part.partition_epoch += 1

    def _apply_config(self, record: ConfigRecord) -> None:
        key = (record.resource_type, record.resource_name)
        configs = self._configs_by_resource.setdefault(key, {})
        if record.value is None:
            configs.pop(record.name, None)
        else:
            configs[record.name] = record.value
        if record.resource_type == BROKER_RESOURCE:
            self._broker_configs = self._nonempty(BROKER_RESOURCE)
        elif record.resource_type == GROUP_RESOURCE:
            self._group_configs = self._nonempty(GROUP_RESOURCE)
        elif record.resource_type == CLIENT_METRICS_RESOURCE:
            self._client_metrics = self._nonempty(CLIENT_METRICS_RESOURCE)

    def _nonempty(self, resource_type: int) -> dict[str, dict[str, str]]:
        return {name: dict(c) for (kind, name), c in self._configs_by_resource.items() if kind == resource_type and c}

    def _apply_security(self, record: Message) -> None:
        if isinstance(record, UserScramCredentialRecord):
            credential = ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)
            mechanisms = {**self._scram.get(record.name, {}), _MECHANISM_NAMES[record.mechanism]: credential}
            self._scram = {**self._scram, record.name: mechanisms}
        elif isinstance(record, RemoveUserScramCredentialRecord):
            remaining = {m: c for m, c in self._scram.get(record.name, {}).items()
                         if m != _MECHANISM_NAMES.get(record.mechanism)}
            self._scram = {u: m for u, m in {**self._scram, record.name: remaining}.items() if m}
        elif isinstance(record, AccessControlEntryRecord):
            binding = AclBinding(ResourceType(record.resource_type), record.resource_name,
                                 PatternType(record.pattern_type), record.principal, record.host,
                                 AclOperation(record.operation), AclPermissionType(record.permission_type))
            self._acl_ids[binding] = record.id
            self._acls = frozenset(self._acl_ids)
        elif isinstance(record, RemoveAccessControlEntryRecord):
            self._acl_ids = {b: i for b, i in self._acl_ids.items() if i != record.id}
            self._acls = frozenset(self._acl_ids)
        else:
            self._apply_other(record)

    def _apply_other(self, record: Message) -> None:
        if isinstance(record, ClientQuotaRecord):
            entity: QuotaEntity = tuple(sorted((e.entity_type, e.entity_name) for e in record.entity))
            values = dict(self._quotas.get(entity, {}))
            if record.remove:
                values.pop(record.key, None)
            else:
                values[record.key] = record.value
            self._quotas = {e: v for e, v in {**self._quotas, entity: values}.items() if v}
        elif isinstance(record, ProducerIdsRecord):
            self._next_producer_id = record.next_producer_id
        elif isinstance(record, DelegationTokenRecord):
            self._tokens = {**self._tokens, record.token_id: DelegationTokenInfo(
                record.token_id, record.owner, record.requester, tuple(record.renewers),
                record.issue_timestamp, record.max_timestamp, record.expiration_timestamp)}
        elif isinstance(record, RemoveDelegationTokenRecord):
            self._tokens = {k: v for k, v in self._tokens.items() if k != record.token_id}
        elif isinstance(record, FeatureLevelRecord):
            levels = dict(self._features or {})
            levels[record.name] = record.feature_level
            self._features = {name: level for name, level in sorted(levels.items()) if level > 0}
            self._features_epoch = self.applied_offset
        # Records of the quorum's own bookkeeping (broker registrations, NoOp, ...) change nothing here.

    def close(self) -> None:
        self.quorum.close()

    def import_state(self, state: MetadataState) -> None:
        """Take over another store's state (a data dir from before the metadata log) as records."""
        self._write(_state_records(state))

    def import_records(self, records: Sequence[Message]) -> None:
        """Append records written elsewhere (a format step's bootstrap records) and apply them."""
        self._write(records)

    # --- topics -----------------------------------------------------------------------------------
    @_one_at_a_time
    async def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                           internal: bool = False, elected: bool = True) -> TopicMeta:
        if name in self._topics:
            raise TopicExists(name)
        topic_id = new_topic_id()
        records: list[Message] = [TopicRecord(name=name, topic_id=topic_id)]
        records += _config_records(TOPIC_RESOURCE, name, {}, configs)
        records += self._partition_records(topic_id, assignment)
        await self._commit(records)
        meta = self._topics[name]
        meta.internal = internal or meta.internal
        self.changes.publish(MetadataChange(ChangeKind.TOPIC_CREATED, meta, tuple(sorted(meta.partitions))))
        return meta

    @_one_at_a_time
    async def delete_topic(self, name: str) -> TopicMeta:
        meta = self._existing(name)
        await self._commit([RemoveTopicRecord(topic_id=meta.topic_id)])
        self.changes.publish(MetadataChange(ChangeKind.TOPIC_DELETED, meta, tuple(sorted(meta.partitions))))
        return meta

    @_one_at_a_time
    async def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMeta:
        meta = self._existing(name)
        await self._commit(self._partition_records(meta.topic_id, assignment))
        self.changes.publish(MetadataChange(ChangeKind.PARTITIONS_ADDED, meta, tuple(sorted(assignment))))
        return meta

    @_one_at_a_time
    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        meta = self._existing(name)
        records = _config_records(TOPIC_RESOURCE, name, meta.configs, configs)
        await self._commit(records + self._elrs_cleared(name, records))
        self.changes.publish(MetadataChange(ChangeKind.TOPIC_CONFIGS_CHANGED, meta, tuple(sorted(meta.partitions))))

    def _partition_records(self, topic_id: uuid.UUID, assignment: dict[int, list[int]]) -> list[Message]:
        """The PartitionRecords of new partitions (the single node leaves their directories out)."""
        return _partition_records(topic_id, assignment)

    def _existing(self, name: str) -> TopicMeta:
        meta = self._topics.get(name)
        if meta is None:
            raise NoSuchTopic(name)
        return meta

    # --- configs ----------------------------------------------------------------------------------
    @_one_at_a_time
    async def set_broker_configs(self, scope: str, configs: dict[str, str]) -> None:
        records = _config_records(BROKER_RESOURCE, scope, self._broker_configs.get(scope, {}), configs)
        await self._commit(records + (self._elrs_cleared("", records) if scope == "" else []))
        self.changes.publish(MetadataChange(ChangeKind.BROKER_CONFIGS_CHANGED))

    def _elrs_cleared(self, topic_name: str, records: list[Message]) -> list[Message]:
        """A ClearElrRecord behind a change of ``min.insync.replicas`` (a topic's, or the cluster
        default's for every topic), with eligible leader replicas on: an ELR chosen under the old
        minimum may not hold what the new one committed (Kafka's createClearElrRecordsAsNeeded)."""
        changed = any(isinstance(r, ConfigRecord) and r.name == MIN_ISR for r in records)
        if not changed or (self._features or {}).get(ELR_FEATURE, 0) < 1:
            return []
        return [ClearElrRecord(topic_name=topic_name)]

    @_one_at_a_time
    async def set_group_configs(self, group_id: str, configs: dict[str, str]) -> None:
        await self._commit(_config_records(GROUP_RESOURCE, group_id, self._group_configs.get(group_id, {}), configs))
        self.changes.publish(MetadataChange(ChangeKind.GROUP_CONFIGS_CHANGED))

    async def validate_configs(self, resource_type: int, name: str, configs: dict[str, str]) -> None:
        """Nothing beyond the request's own checks, which ran on this node, the one writing."""

    @_one_at_a_time
    async def set_client_metrics(self, name: str, configs: dict[str, str]) -> None:
        await self._commit(_config_records(CLIENT_METRICS_RESOURCE, name, self._client_metrics.get(name, {}),
                                           configs))

    @_one_at_a_time
    async def allocate_producer_ids(self, count: int) -> int:
        """A block of ``count`` ids, as the controller grants AllocateProducerIds: the record holds
        the next free id, so ids never repeat after a restart."""
        first = self._next_producer_id
        await self._commit([ProducerIdsRecord(broker_id=self.quorum.node_id, broker_epoch=-1,
                                              next_producer_id=first + count)])
        return first

    # --- security ---------------------------------------------------------------------------------
    @_one_at_a_time
    async def set_scram_credential(self, user: str, mechanism: str, credential: ScramCredential | None) -> None:
        code = SCRAM_MECHANISM_TYPES[mechanism]
        record: Message
        if credential is None:
            if self.scram_credential(user, mechanism) is None:
                return
            record = RemoveUserScramCredentialRecord(name=user, mechanism=code)
        else:
            record = UserScramCredentialRecord(name=user, mechanism=code, salt=credential.salt,
                                               stored_key=credential.stored_key, server_key=credential.server_key,
                                               iterations=credential.iterations)
        await self._commit([record])
        self.changes.publish(MetadataChange(ChangeKind.SCRAM_CREDENTIALS_CHANGED))

    @_one_at_a_time
    async def add_acls(self, acls: list[AclBinding]) -> None:
        new = [a for a in dict.fromkeys(acls) if a not in self._acl_ids]
        await self._commit([_acl_record(a) for a in new])
        self.changes.publish(MetadataChange(ChangeKind.ACLS_CHANGED))

    @_one_at_a_time
    async def remove_acls(self, acls: list[AclBinding]) -> None:
        ids = [self._acl_ids[a] for a in dict.fromkeys(acls) if a in self._acl_ids]
        await self._commit([RemoveAccessControlEntryRecord(id=i) for i in ids])
        self.changes.publish(MetadataChange(ChangeKind.ACLS_CHANGED))

    @_one_at_a_time
    async def alter_client_quotas(self, entity: QuotaEntity, changes: dict[str, float | None]) -> None:
        entity_data = [ClientQuotaRecord.EntityData(entity_type=kind, entity_name=name) for kind, name in entity]
        await self._commit([ClientQuotaRecord(entity=entity_data, key=key, value=0.0 if value is None else value,
                                              remove=value is None)
                            for key, value in sorted(changes.items())])
        self.changes.publish(MetadataChange(ChangeKind.CLIENT_QUOTAS_CHANGED))

    @_one_at_a_time
    async def set_delegation_token(self, token: DelegationTokenInfo) -> None:
        await self._commit([_token_record(token)])
        self.changes.publish(MetadataChange(ChangeKind.DELEGATION_TOKENS_CHANGED))

    @_one_at_a_time
    async def remove_delegation_token(self, token_id: str) -> None:
        if token_id in self._tokens:
            await self._commit([RemoveDelegationTokenRecord(token_id=token_id)])
            self.changes.publish(MetadataChange(ChangeKind.DELEGATION_TOKENS_CHANGED))

    # --- finalized features: FeatureLevelRecords --------------------------------------------------
    @_one_at_a_time
    async def set_finalized_features(self, levels: dict[str, int], static_min_isr: int = 1) -> int:
        """Finalize the levels named (level 0 drops a feature, as Kafka does); a feature not named
        keeps its level (a quorum's metadata.version, which UpdateFeatures does not move here).
        The new epoch is the log offset that holds the change, as in KRaft."""
        current = self._features or {}
        safety = self.elr_safety_records(static_min_isr) if levels.get(ELR_FEATURE, 0) > 0 else []
        await self._commit([*safety, *(FeatureLevelRecord(name=name, feature_level=level)
                                       for name, level in sorted(levels.items()) if current.get(name, 0) != level)])
        if safety:
            self.changes.publish(MetadataChange(ChangeKind.BROKER_CONFIGS_CHANGED))
        return self._features_epoch

    def elr_safety_records(self, static_min_isr: int) -> list[Message]:
        """Eligible leader replicas count on one min ISR for the whole cluster: the cluster-level
        min.insync.replicas (the controller's static value) unless set, and no broker's own (Kafka's
        maybeGenerateElrSafetyRecords, written with the feature level in one batch)."""
        records: list[Message] = []
        if MIN_ISR not in self._broker_configs.get("", {}):
            records.append(ConfigRecord(resource_type=BROKER_RESOURCE, resource_name="", name=MIN_ISR,
                                        value=str(static_min_isr)))
        records += [ConfigRecord(resource_type=BROKER_RESOURCE, resource_name=scope, name=MIN_ISR, value=None)
                    for scope, configs in sorted(self._broker_configs.items()) if scope and MIN_ISR in configs]
        return records


def _partition_records(topic_id: uuid.UUID, assignment: dict[int, list[int]]) -> list[Message]:
    return [PartitionRecord(partition_id=index, topic_id=topic_id, replicas=list(replicas), isr=list(replicas),
                            leader=replicas[0], leader_epoch=0, partition_epoch=0)
            for index, replicas in sorted(assignment.items())]


def _state_records(state: MetadataState, acl_ids: dict[AclBinding, uuid.UUID] | None = None,
                   partition_record: Callable[[PartitionRecord], None] = lambda _record: None) -> list[Message]:
    """Records that rebuild ``state`` from nothing, leader epochs included (clients ignore
    metadata whose leader epoch goes back): the finalized features first (metadata.version before
    anything, as Kafka's image writes them), topics, configs, then credentials, ACLs, quotas and
    tokens. ``partition_record`` completes each PartitionRecord (a quorum's directories and
    reassignments)."""
    records: list[Message] = _feature_records(state)
    for topic in sorted(state.topics().values(), key=lambda t: t.name):
        records.append(TopicRecord(name=topic.name, topic_id=topic.topic_id))
        records += _config_records(TOPIC_RESOURCE, topic.name, {}, topic.configs)
        for index, p in sorted(topic.partitions.items()):
            record = PartitionRecord(partition_id=index, topic_id=topic.topic_id, replicas=list(p.replicas),
                                     isr=list(p.isr), leader=p.leader, leader_epoch=p.leader_epoch,
                                     partition_epoch=p.partition_epoch,
                                     # tagged: written only when not empty, as Kafka's PartitionRegistration
                                     eligible_leader_replicas=list(p.elr) or None,
                                     last_known_elr=list(p.last_known_elr) or None,
                                     directories=list(p.directories))
            partition_record(record)
            records.append(record)
    for kind, names, configs_of in ((BROKER_RESOURCE, state.broker_scopes(), state.broker_configs),
                                    (GROUP_RESOURCE, state.configured_groups(), state.group_configs),
                                    (CLIENT_METRICS_RESOURCE, state.client_metrics_names(), state.client_metrics)):
        for name in names:
            records += _config_records(kind, name, {}, configs_of(name))
    return records + _security_records(state, acl_ids or {})


def _security_records(state: MetadataState, acl_ids: dict[AclBinding, uuid.UUID]) -> list[Message]:
    records: list[Message] = []
    for user, mechanisms in sorted(state.scram_credentials().items()):
        records += [UserScramCredentialRecord(name=user, mechanism=SCRAM_MECHANISM_TYPES[m], salt=c.salt,
                                              stored_key=c.stored_key, server_key=c.server_key,
                                              iterations=c.iterations) for m, c in sorted(mechanisms.items())]
    records += [_acl_record(a, acl_ids.get(a)) for a in sorted(state.acls(), key=repr)]
    for entity, values in sorted(state.client_quotas().items(), key=lambda q: repr(q[0])):
        entity_data = [ClientQuotaRecord.EntityData(entity_type=kind, entity_name=name) for kind, name in entity]
        records += [ClientQuotaRecord(entity=entity_data, key=k, value=v, remove=False) for k, v in sorted(values.items())]
    records += [_token_record(t) for _, t in sorted(state.delegation_tokens().items())]
    if state.next_producer_id:
        records.append(ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=state.next_producer_id))
    return records


def _feature_records(state: MetadataState) -> list[Message]:
    _epoch, levels = state.finalized_features()
    names = sorted(levels or {}, key=lambda name: (name != METADATA_VERSION, name))
    return [FeatureLevelRecord(name=n, feature_level=(levels or {})[n]) for n in names]


def _token_record(token: DelegationTokenInfo) -> DelegationTokenRecord:
    return DelegationTokenRecord(owner=token.owner, requester=token.requester, renewers=list(token.renewers),
                                 issue_timestamp=token.issue_ms, max_timestamp=token.max_ms,
                                 expiration_timestamp=token.expiry_ms, token_id=token.token_id)


def _config_records(resource_type: int, name: str, before: dict[str, str], after: dict[str, str]) -> list[Message]:
    """ConfigRecords taking ``before`` to ``after``: a null value removes a key."""
    removed: Iterable[tuple[str, str | None]] = ((k, None) for k in sorted(before) if k not in after)
    changed = ((k, v) for k, v in sorted(after.items()) if before.get(k) != v)
    return [ConfigRecord(resource_type=resource_type, resource_name=name, name=k, value=v)
            for k, v in [*removed, *changed]]


def _acl_record(binding: AclBinding, acl_id: uuid.UUID | None = None) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(id=acl_id or uuid.uuid4(), resource_type=int(binding.resource_type),
                                    resource_name=binding.resource_name, pattern_type=int(binding.pattern_type),
                                    principal=binding.principal, host=binding.host,
                                    operation=int(binding.operation), permission_type=int(binding.permission))
