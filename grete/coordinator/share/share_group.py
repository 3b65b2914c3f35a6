"""A share group's membership (KIP-932): members, group and member epochs, the target assignment.

Share groups have no revocation: a member's assignment is the target assignment as soon as it is
computed, and its member epoch is the assignment epoch. The group epoch moves when a member joins,
leaves or changes its subscription, or when a subscribed topic's partitions change; the target
assignment is recomputed when the group epoch is ahead of the assignment epoch.

Pure state: the owner (grete.broker.groups.share_groups) keeps the session timers and resolves topics.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from grete.protocol.errors import ErrorCode

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
ASSIGNOR_NAME = "simple"

# topic name -> (topic id, partition count), for the topics that exist
TopicView = Mapping[str, tuple[uuid.UUID, int]]
Assignment = dict[uuid.UUID, list[int]]


@dataclass(slots=True)
class ShareMember:
    member_id: str
    epoch: int = 0
    previous_epoch: int = -1
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed: list[str] = field(default_factory=list)
    assignment: Assignment = field(default_factory=dict)


@dataclass(slots=True)
class InitializedTopic:
    """A topic whose share partitions the group has (ShareGroupStatePartitionMetadata's
    TopicPartitionsInfo): assigned to a member at least once, so a share-partition leader may hold
    state for them. What DescribeShareGroupOffsets without topics reports, members or not."""
    name: str
    partitions: set[int]
    create_ms: int


@dataclass(slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member: ShareMember | None = None
    send_assignment: bool = False


def simple_assign(members: list[ShareMember], topics: TopicView) -> dict[str, Assignment]:
    """Kafka 4.x's simple assignor, spreading partitions: for each subscribed topic, with more
    members than partitions every partition goes to ceil(members / partitions) members (shared);
    otherwise the partitions are dealt round-robin, one member each. Members are ordered by id so
    every coordinator computes the same answer (Kafka's member order may differ: same shape)."""
    result: dict[str, Assignment] = {m.member_id: {} for m in members}
    by_topic: dict[str, list[ShareMember]] = {}
    for m in sorted(members, key=lambda m: m.member_id):
        for name in m.subscribed:
            by_topic.setdefault(name, []).append(m)
    for name, subscribers in sorted(by_topic.items()):
        if name not in topics:
            continue
        topic_id, count = topics[name]
        if count <= 0:
            continue
        if len(subscribers) > count:
            # each partition to ceil(members / partitions) members, dealt in turn (Kafka 4.3.1 gives
            # 3 members of 2 partitions [0], [0, 1], [1])
            per = -(-len(subscribers) // count)
            for k in range(count * per):
                result[subscribers[k % len(subscribers)].member_id].setdefault(topic_id, []).append(k // per)
        else:
            for p in range(count):
                result[subscribers[p % len(subscribers)].member_id].setdefault(topic_id, []).append(p)
    return result


def topics_hash(topics: TopicView) -> int:
    """A signed 64-bit digest of the subscribed topics (name, id, partition count); 0 for none.
    Kept in ShareGroupMetadata's MetadataHash so a reloaded group notices topics that changed while
    it was away (Kafka hashes more, racks included: a Kafka broker reading grete's value finds it
    different and recomputes the assignment once, which is harmless)."""
    if not topics:
        return 0
    digest = hashlib.blake2b(digest_size=8)
    for name, (topic_id, count) in sorted(topics.items()):
        digest.update(f"{name}\0{topic_id}\0{count}\0".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


class ShareGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        # Kafka 4.3 starts a share group at epoch 1 with an empty assignment, as a consumer group
        # (ModernGroup, KAFKA-20268): the first join makes epoch 2.
        self.epoch = 1
        self.assignment_epoch = 1
        self.metadata_hash = 0
        self.members: dict[str, ShareMember] = {}
        self.initialized: dict[uuid.UUID, InitializedTopic] = {}
        # the group's records in __consumer_offsets as last written (grete.coordinator.share.share_records),
        # and the members whose records may have changed since
        self.persisted: dict[bytes, bytes] = {}
        self.dirty: set[str] = set()

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed}

    def heartbeat(self, member_id: str, member_epoch: int, *, rack_id: str | None, subscribed: list[str] | None,
                  client_id: str, client_host: str, topics: TopicView, max_size: int) -> HeartbeatResult:
        if not member_id:
            return HeartbeatResult(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        if member_epoch == LEAVE_EPOCH:
            if self.remove(member_id) is None:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {member_id} is not a member of group {self.group_id}.")
            return HeartbeatResult(ErrorCode.NONE, member=ShareMember(member_id, LEAVE_EPOCH))
        member = self.members.get(member_id)
        changed_group = False  # the group epoch moves once per heartbeat, whatever changed
        if member_epoch == JOIN_EPOCH:
            if not subscribed and (member is None or not member.subscribed):
                return HeartbeatResult(ErrorCode.INVALID_REQUEST,
                                       "SubscribedTopicNames must be set in first request.")
            if member is None:
                if len(self.members) >= max_size:
                    return HeartbeatResult(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                           f"The share group has reached its maximum capacity of {max_size} members.")
                member = ShareMember(member_id)
                self.members[member_id] = member
                changed_group = True
        elif member is None:
            return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                   f"Member {member_id} is not a member of group {self.group_id}.")
        elif member_epoch != member.epoch:
            return HeartbeatResult(ErrorCode.FENCED_MEMBER_EPOCH,
                                   f"The share group member has a smaller member epoch ({member_epoch}) than "
                                   f"the one known by the group coordinator ({member.epoch}).")
        member.rack_id, member.client_id, member.client_host = rack_id, client_id, client_host
        self.dirty.add(member_id)
        if subscribed is not None and sorted(subscribed) != sorted(member.subscribed):
            member.subscribed = list(subscribed)
            changed_group = True
        if self._notice_topic_changes(topics) or changed_group:
            self.epoch += 1
        if self.assignment_epoch < self.epoch:
            self._assign(topics)
        changed = member.epoch != self.assignment_epoch or member_epoch == JOIN_EPOCH
        if member.epoch != self.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, self.assignment_epoch
        return HeartbeatResult(ErrorCode.NONE, member=member, send_assignment=changed)

    def remove(self, member_id: str) -> ShareMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.epoch += 1
            self.dirty.add(member_id)
        return member

    def _notice_topic_changes(self, topics: TopicView) -> bool:
        """A subscribed topic created, deleted or grown moves the group epoch (a new assignment)."""
        digest = topics_hash({name: topics[name] for name in self.subscribed_topics() if name in topics})
        if digest == self.metadata_hash:
            return False
        self.metadata_hash = digest
        return True

    def _assign(self, topics: TopicView) -> None:
        target = simple_assign(list(self.members.values()), topics)
        self.dirty.update(target)
        names = {topic_id: name for name, (topic_id, _count) in topics.items()}
        for member_id, assignment in target.items():
            self.members[member_id].assignment = {t: sorted(ps) for t, ps in assignment.items()}
            for topic_id, partitions in assignment.items():
                self._initialized(topic_id, names[topic_id]).partitions.update(partitions)
        self.assignment_epoch = self.epoch

    def _initialized(self, topic_id: uuid.UUID, name: str) -> InitializedTopic:
        if topic_id not in self.initialized:
            self.initialized[topic_id] = InitializedTopic(name, set(), int(time.time() * 1000))
        return self.initialized[topic_id]
