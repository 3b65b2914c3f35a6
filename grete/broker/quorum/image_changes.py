"""What a KRaft broker's metadata image changed, published once per committed batch.

A broker's image moves with the records the controller commits, whoever asked for the change: this
broker's handlers, another broker's, a tool talking to the controller. The broker's parts that
follow the metadata (dynamic configs, log configs, the authorizer, quotas, SCRAM logins, partitions
waiting for a follower to come back) learn of it here, as they learn of a single node's own writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from grete.coordinator.kraft.store import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE
from grete.coordinator.metadata import ChangeFeed, ChangeKind, MetadataChange, TopicMeta
from grete.protocol.codec import Message
from grete.protocol.metadata import (
    AccessControlEntryRecord,
    BrokerRegistrationChangeRecord,
    ClientQuotaRecord,
    ConfigRecord,
    DelegationTokenRecord,
    PartitionRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UserScramCredentialRecord,
)

_SIMPLE: dict[type[Message], ChangeKind] = {
    UserScramCredentialRecord: ChangeKind.SCRAM_CREDENTIALS_CHANGED,
    RemoveUserScramCredentialRecord: ChangeKind.SCRAM_CREDENTIALS_CHANGED,
    AccessControlEntryRecord: ChangeKind.ACLS_CHANGED,
    RemoveAccessControlEntryRecord: ChangeKind.ACLS_CHANGED,
    ClientQuotaRecord: ChangeKind.CLIENT_QUOTAS_CHANGED,
    DelegationTokenRecord: ChangeKind.DELEGATION_TOKENS_CHANGED,
    RemoveDelegationTokenRecord: ChangeKind.DELEGATION_TOKENS_CHANGED,
}
_CONFIGS = {BROKER_RESOURCE: ChangeKind.BROKER_CONFIGS_CHANGED, GROUP_RESOURCE: ChangeKind.GROUP_CONFIGS_CHANGED}
ENTITY_KINDS = frozenset(_SIMPLE.values()) | frozenset(_CONFIGS.values())


def entity_change(record: Message) -> ChangeKind | None:
    """The change a record makes to the cluster's entities (credentials, ACLs, quotas, tokens,
    broker and group configs), which a node's caches follow; None for topics and brokers."""
    if isinstance(record, ConfigRecord):
        return _CONFIGS.get(record.resource_type)
    return _SIMPLE.get(type(record))


def publish_entity_changes(changes: ChangeFeed, records: Iterable[Message]) -> None:
    """Each entity change the records make, once: what a voter applying a committed batch publishes,
    so that its caches follow the log whoever wrote it (a voter that becomes leader answers from them)."""
    kinds = {kind for record in records if (kind := entity_change(record)) is not None}
    for kind in sorted(kinds, key=lambda k: k.value):
        changes.publish(MetadataChange(kind))


def publish_every_entity(changes: ChangeFeed) -> None:
    """Every entity kind changed (a snapshot replaced the image): the caches reload them all."""
    for kind in sorted(ENTITY_KINDS, key=lambda k: k.value):
        changes.publish(MetadataChange(kind))


class ImageChanges:
    def __init__(self, changes: ChangeFeed, topic_by_id: Callable[[uuid.UUID], TopicMeta | None],
                 topic: Callable[[str], TopicMeta | None]) -> None:
        self._changes = changes
        self._topic_by_id = topic_by_id
        self._topic = topic
        self._known: dict[uuid.UUID, TopicMeta] = {}  # every topic of the image, kept for its deletion
        self._created: set[uuid.UUID] = set()
        self._added: dict[uuid.UUID, set[int]] = {}
        self._deleted: list[TopicMeta] = []
        self._configured: set[str] = set()  # topics whose configs changed
        self._kinds: set[ChangeKind] = set()
        self._joined: set[int] = set()

    def applied(self, record: Message) -> None:
        """A record of the batch, applied to the image."""
        if isinstance(record, RemoveTopicRecord):
            # The image has dropped it; the last state it was published in still stands here.
            self._created.discard(record.topic_id)
            found = self._known.pop(record.topic_id, None)
            if found is not None:
                self._deleted.append(found)
        elif isinstance(record, TopicRecord):
            self._created.add(record.topic_id)
        elif isinstance(record, PartitionRecord) and record.topic_id not in self._created:
            self._added.setdefault(record.topic_id, set()).add(record.partition_id)
        elif isinstance(record, ConfigRecord) and record.resource_type == TOPIC_RESOURCE:
            self._configured.add(record.resource_name)
        elif isinstance(record, UnfenceBrokerRecord):
            self._joined.add(record.id)
        elif isinstance(record, BrokerRegistrationChangeRecord) and record.fenced == -1:
            self._joined.add(record.broker_id)
        elif (kind := entity_change(record)) is not None:
            self._kinds.add(kind)

    def reloaded(self, topics: Iterable[TopicMeta]) -> None:
        """The image was rebuilt from a snapshot: a topic it no longer has is deleted, a new one
        created, one that has more partitions grew; configs and every entity are published again
        (what the snapshot changed in them is not told apart)."""
        now = {topic.topic_id: topic for topic in topics}
        for topic_id, old in list(self._known.items()):
            if topic_id not in now:
                self._deleted.append(self._known.pop(topic_id))
                continue
            self._known[topic_id] = now[topic_id]
            grown = set(now[topic_id].partitions) - set(old.partitions)
            if grown:
                self._added[topic_id] = grown
            self._configured.add(now[topic_id].name)
        self._created |= set(now) - set(self._known)
        self._kinds |= ENTITY_KINDS

    def publish(self) -> None:
        """After the batch is applied: each change once."""
        for gone in self._deleted:
            self._changes.publish(MetadataChange(ChangeKind.TOPIC_DELETED, gone, tuple(sorted(gone.partitions))))
        for topic_id in sorted(self._created):
            created = self._topic_by_id(topic_id)
            if created is not None:
                self._known[topic_id] = created
                self._changes.publish(MetadataChange(ChangeKind.TOPIC_CREATED, created,
                                                     tuple(sorted(created.partitions))))
        for topic_id, indexes in sorted(self._added.items()):
            grown = self._topic_by_id(topic_id)
            if grown is not None:
                self._changes.publish(MetadataChange(ChangeKind.PARTITIONS_ADDED, grown, tuple(sorted(indexes))))
        for name in sorted(self._configured):
            configured = self._topic(name)
            if configured is not None and configured.topic_id not in self._created:
                self._changes.publish(MetadataChange(ChangeKind.TOPIC_CONFIGS_CHANGED, configured,
                                                     tuple(sorted(configured.partitions))))
        for kind in sorted(self._kinds, key=lambda k: k.value):
            self._changes.publish(MetadataChange(kind))
        if self._joined:
            self._changes.publish(MetadataChange(ChangeKind.BROKERS_JOINED, brokers=tuple(sorted(self._joined))))
        self._created, self._added, self._deleted = set(), {}, []
        self._configured, self._kinds, self._joined = set(), set(), set()
