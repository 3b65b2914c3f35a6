"""The state of a KIP-848 consumer group and the reconciliation of one member (Kafka's
CurrentAssignmentBuilder), free of timers and I/O.

Epochs: the *group epoch* rises with every change of membership, subscriptions or the subscribed
topics' partitions; the *assignment epoch* is the group epoch the target assignment was computed for;
a *member epoch* is the epoch of the assignment the member holds. A member moves to the assignment
epoch only once it holds nothing that the target gives to someone else: it is first told to revoke
(state UNREVOKED_PARTITIONS, epoch unchanged) and moves on when its heartbeat no longer reports those
partitions. A partition goes to its new owner only after the previous owner released it
(UNRELEASED_PARTITIONS until then): revoke before assign.
"""

from __future__ import annotations

import asyncio
import enum
import uuid
from dataclasses import dataclass, field

from grete.coordinator.groups.consumer_assignors import Assignment, TopicPartition

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
EMPTY: Assignment = frozenset()


class MemberState(enum.IntEnum):
    """Kafka's MemberState, persisted as an int8 in ConsumerGroupCurrentMemberAssignmentValue."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class ClassicMeta:
    """A member that speaks the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside a consumer
    group: its session timeout and its JoinGroup protocols (name, ConsumerProtocolSubscription)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = EMPTY
    pending_revocation: Assignment = EMPTY
    session_timer: asyncio.TimerHandle | None = None
    rebalance_timer: asyncio.TimerHandle | None = None
    classic: ClassicMeta | None = None
    # Classic members only: SyncGroup must follow JoinGroup, and JoinGroup a REBALANCE_IN_PROGRESS
    # heartbeat, within the rebalance timeout.
    sync_timer: asyncio.TimerHandle | None = None
    join_timer: asyncio.TimerHandle | None = None

    def owned(self) -> Assignment:
        """What the member may still be consuming: its assignment and what it has yet to revoke."""
        return self.assigned | self.pending_revocation


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Assignment] = field(default_factory=dict)  # member id -> target assignment
    owners: dict[TopicPartition, str] = field(default_factory=dict)  # partition -> member holding it
    # The subscribed topics (name -> (id, partitions)) the target assignment was computed from.
    subscribed: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    assignor: str = ""
    # The value of each of the group's records in __consumer_offsets as last written (key -> value),
    # so a heartbeat appends only what it changed (consumer_records.changes).
    persisted: dict[bytes, bytes] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)  # members whose records may have changed

    def state_name(self) -> str:
        """Kafka's ConsumerGroupState as DescribeGroups and ListGroups spell it."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def set_owned(self, member: ConsumerMember, assigned: Assignment, pending: Assignment) -> None:
        """Change what a member holds, keeping the partition -> owner index in step."""
        for tp in member.owned():
            if self.owners.get(tp) == member.member_id:
                del self.owners[tp]
        member.assigned, member.pending_revocation = assigned, pending
        for tp in member.owned():
            self.owners[tp] = member.member_id

    def release(self, member: ConsumerMember) -> None:
        self.set_owned(member, EMPTY, EMPTY)


def reconcile(group: ConsumerGroup, member: ConsumerMember, owned: Assignment | None) -> None:
    """Move ``member`` one step toward its target (CurrentAssignmentBuilder). ``owned`` is what the
    heartbeat reported owning, or None when it did not say."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owned & member.pending_revocation:
            return  # still revoking: nothing moves until the member confirms
    elif member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
        return
    target = group.target.get(member.member_id, EMPTY)
    keep = member.assigned & target
    revoke = member.assigned - keep
    wanted = target - keep
    free = frozenset(tp for tp in wanted if group.owners.get(tp, member.member_id) == member.member_id)
    unreleased = wanted - free
    if revoke and (owned is None or owned & revoke):
        # Revoke first: the member keeps its epoch until it reports the partitions gone.
        group.set_owned(member, keep, revoke)
        member.state = MemberState.UNREVOKED_PARTITIONS
        return
    group.set_owned(member, keep | free, EMPTY)
    if member.member_epoch != group.assignment_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = group.assignment_epoch
    member.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
