"""The state of a KIP-848 consumer group and the reconciliation of one member (Kafka's
CurrentAssignmentBuilder), free of timers and I/O.

The group epoch (``modern_state``) rises with every change of membership, subscriptions or the
subscribed topics' partitions. A member moves to the assignment
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
from grete.coordinator.groups.modern_state import ModernGroupState, ModernMember

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
class ConsumerMember(ModernMember[TopicPartition]):
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    state: MemberState = MemberState.STABLE
    classic: ClassicMeta | None = None
    # Classic members only: SyncGroup must follow JoinGroup, and JoinGroup a REBALANCE_IN_PROGRESS
    # heartbeat, within the rebalance timeout.
    sync_timer: asyncio.TimerHandle | None = None
    join_timer: asyncio.TimerHandle | None = None


@dataclass(eq=False)
class ConsumerGroup(ModernGroupState[ConsumerMember, TopicPartition]):
    # A new group starts at group and assignment epoch 1 (an empty target assignment), so its first
    # join makes epoch 2: Kafka 4.3's ModernGroup constructor and TargetAssignmentMetadata.INITIAL
    # (KAFKA-20268; before 4.3 a new group was at 0 and its first join made 1).
    group_epoch: int = 1
    assignment_epoch: int = 1
    # The subscribed topics (name -> (id, partitions)) the target assignment was computed from.
    subscribed: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)
    assignor: str = ""

    def state_name(self) -> str:
        """Kafka's ConsumerGroupState as DescribeGroups and ListGroups spell it."""
        if not self.members:
            return "Empty"
        return self.moving() or "Stable"


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
