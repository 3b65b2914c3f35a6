"""What consumer groups (KIP-848) and streams groups (KIP-1071) share, free of timers and I/O: a member
with its epochs and what it holds, a group with its epochs, members, static members, target
assignment and owners (Kafka's ModernGroup and ModernGroupMember). What a member holds is a set of
partitions in a consumer group and of tasks in a streams group (``T``).

Epochs: the *group epoch* rises with every change the assignment depends on; the *assignment epoch*
is the group epoch the target assignment was computed for; a *member epoch* is the epoch of the
assignment the member holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from grete.protocol.errors import ErrorCode

T = TypeVar("T", bound=Hashable)

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
STABLE, REVOKING = 0, 1  # MemberState.STABLE and UNREVOKED_PARTITIONS / UNREVOKED_TASKS in both kinds


class GroupRequestError(Exception):
    """A heartbeat refused: Kafka's error code and, where Kafka gives one, its message."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message


def invalid_request(message: str) -> GroupRequestError:
    return GroupRequestError(ErrorCode.INVALID_REQUEST, message)


def check_identity(group_id: str, instance_id: str | None, rack_id: str | None) -> None:
    """The checks every kind's heartbeat validation starts with, with Kafka's messages."""
    if not group_id:
        raise invalid_request("GroupId can't be empty.")
    if instance_id == "":
        raise invalid_request("InstanceId can't be empty.")
    if rack_id == "":
        raise invalid_request("RackId can't be empty.")


@dataclass(eq=False)
class ModernMember(Generic[T]):
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = STABLE  # each kind's MemberState (an IntEnum)
    assigned: frozenset[T] = frozenset()
    pending_revocation: frozenset[T] = frozenset()
    session_timer: asyncio.TimerHandle | None = None
    rebalance_timer: asyncio.TimerHandle | None = None

    def owned(self) -> frozenset[T]:
        """What the member may still be working on: its assignment and what it has yet to revoke."""
        return self.assigned | self.pending_revocation


M = TypeVar("M", bound=ModernMember[Any])


@dataclass(eq=False)
class ModernGroupState(Generic[M, T]):
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, M] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, frozenset[T]] = field(default_factory=dict)  # member id -> target assignment
    owners: dict[T, str] = field(default_factory=dict)  # partition or task -> member holding it
    # The value of each of the group's records in __consumer_offsets as last written (key -> value),
    # so a heartbeat appends only what it changed.
    persisted: dict[bytes, bytes] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)  # members whose records may have changed

    def moving(self) -> str | None:
        """"Assigning" or "Reconciling" while the group moves to a new assignment, else None."""
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state != STABLE for m in self.members.values()):
            return "Reconciling"
        return None

    def set_owned(self, member: M, assigned: frozenset[T], pending: frozenset[T]) -> None:
        """Change what a member holds, keeping the owner index in step."""
        for item in member.owned():
            if self.owners.get(item) == member.member_id:
                del self.owners[item]
        member.assigned, member.pending_revocation = assigned, pending
        for item in member.owned():
            self.owners[item] = member.member_id

    def release(self, member: M) -> None:
        self.set_owned(member, frozenset(), frozenset())
