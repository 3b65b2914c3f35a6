"""The state of a streams group (KIP-1071), its task assignor and the reconciliation of one member
(Kafka's streams CurrentAssignmentBuilder), free of timers and I/O.

A *task* is ``(subtopology id, partition)``. Epochs work as in KIP-848 consumer groups: the group
epoch rises with every change of membership, topology or of the topics the topology uses; the target
assignment is computed for a group epoch (the assignment epoch); a member reaches the assignment epoch
once it holds no task the target gives to another member. A member is first told to revoke (state
UNREVOKED_TASKS, its epoch unchanged) and a task goes to its new owner only once the previous owner
reported it gone (UNRELEASED_TASKS until then): revoke before assign.

Standby tasks (``group.streams.num.standby.replicas``, default 0): each active task of a stateful
subtopology gets that many standby copies on members of other processes (a process's instances share a state directory), placed
like the active ones, sticky and by load. Warm-up tasks are not offered (docs/groups.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from grete.coordinator.groups.modern_state import ModernGroupState, ModernMember
from grete.coordinator.groups.streams_topology import Configured, TopicView, Topology
from grete.protocol.errors import ErrorCode

Task = tuple[str, int]
Tasks = frozenset[Task]
NO_TASKS: Tasks = frozenset()


class MemberState(enum.IntEnum):
    """Kafka's streams MemberState, persisted as an int8 in StreamsGroupCurrentMemberAssignmentValue."""

    STABLE = 0
    UNREVOKED_TASKS = 1
    UNRELEASED_TASKS = 2
    UNKNOWN = 127


@dataclass(eq=False)
class StreamsMember(ModernMember[Task]):
    topology_epoch: int = -1
    process_id: str = ""
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] = ()
    state: MemberState = MemberState.STABLE
    standby: Tasks = NO_TASKS
    pending_standby_revocation: Tasks = NO_TASKS
    task_offsets: tuple[tuple[str, int, int], ...] = ()
    task_end_offsets: tuple[tuple[str, int, int], ...] = ()

    @property
    def process(self) -> str:
        return self.process_id or self.member_id


@dataclass(eq=False)
class StreamsGroup(ModernGroupState[StreamsMember, Task]):
    target_standby: dict[str, Tasks] = field(default_factory=dict)  # member id -> target standby tasks
    # The number of standby replicas the target assignment was computed with: a change re-assigns.
    standby_replicas: int = 0
    topology: Topology | None = None
    configured: Configured = field(default_factory=Configured)
    # The sizes of the topics the topology uses, as last configured: a change re-configures.
    topics_seen: dict[str, int] | None = None
    # Raised whenever an assignment or an endpoint changes; members behind it get the IQ map again.
    endpoint_epoch: int = 0
    shutdown_requested: bool = False
    # group.streams.initial.rebalance.delay.ms: a new group assigns no tasks until this time (wall
    # clock ms), so that the instances starting together are in the first assignment.
    delayed_until_ms: int | None = None

    def state_name(self) -> str:
        """Kafka's StreamsGroupState as ListGroups and StreamsGroupDescribe spell it."""
        if not self.members:
            return "Empty"
        if self.topology is None or not self.configured.ready:
            return "NotReady"
        return self.moving() or "Stable"

    def release(self, member: StreamsMember) -> None:
        super().release(member)
        member.standby = member.pending_standby_revocation = NO_TASKS

    def used_topics(self, view: TopicView) -> dict[str, int]:
        if self.topology is None:
            return {}
        return {name: view[name][1] for name in sorted(self.topology.required_topics()) if name in view}


def spread(task: Task) -> tuple[int, str]:
    """Partition by partition across subtopologies."""
    return task[1], task[0]


def assign_active(members: list[str], tasks: dict[str, int], previous: dict[str, Tasks]) -> dict[str, Tasks]:
    """A sticky, balanced assignment of active tasks: every member ends with ``T // M`` or one more
    task; a member keeps the tasks it had as far as that allows, so a rebalance moves as few tasks as
    it can. Tasks are taken partition by partition across subtopologies, so each member gets a share of
    every subtopology (the load differs between them); members and tasks are taken in a fixed order
    so every coordinator computes the same."""
    if not members:
        return {}
    ordered = sorted(members)

    all_tasks = sorted(((sub, p) for sub in tasks for p in range(tasks[sub])), key=spread)
    base, extra = divmod(len(all_tasks), len(ordered))
    result: dict[str, set[Task]] = {m: set() for m in ordered}
    taken: set[Task] = set()
    valid = set(all_tasks)
    # Keep up to the base quota first, then one more for as many members as the remainder allows.
    for limit in (base, base + 1):
        for m in ordered:
            for task in sorted(previous.get(m, NO_TASKS) & valid, key=spread):
                if task in taken or len(result[m]) >= limit:
                    continue
                if limit > base:
                    if extra == 0:
                        break
                    extra -= 1
                result[m].add(task)
                taken.add(task)
    for task in all_tasks:
        if task not in taken:
            least = min(ordered, key=lambda m: (len(result[m]), m))
            result[least].add(task)
    return {m: frozenset(ts) for m, ts in result.items()}


def assign_standby(processes: dict[str, str], active: dict[str, Tasks], replicas: int,
                   previous: dict[str, Tasks], stateful: set[str]) -> dict[str, Tasks]:
    """``replicas`` standby copies of every active task of a stateful subtopology (one with changelog
    topics: only state needs a copy, as in Kafka 4.3.1), each on a member of a process that holds no
    other copy of it (Kafka's rule: never in the active owner's process); the least loaded member
    (active and standby tasks) wins, a member that had the standby counting one task lighter so
    copies stay where their state already is. A task gets fewer copies when processes run out."""
    result: dict[str, set[Task]] = {m: set() for m in processes}
    if replicas <= 0:
        return {m: NO_TASKS for m in processes}
    load = {m: len(active.get(m, NO_TASKS)) for m in processes}
    owner_of = {t: m for m, ts in active.items() for t in ts if m in processes and t[0] in stateful}
    for task in sorted(owner_of, key=spread):
        used = {processes[owner_of[task]]}
        for _ in range(replicas):
            candidates = [m for m in sorted(processes) if processes[m] not in used]
            if not candidates:
                break
            pick = min(candidates, key=lambda m: (load[m] - (task in previous.get(m, NO_TASKS)), m))
            result[pick].add(task)
            load[pick] += 1
            used.add(processes[pick])
    return {m: frozenset(ts) for m, ts in result.items()}


def _still_holds(reported: Tasks | None, pending: Tasks) -> bool:
    """Whether a member may still run tasks it must give up (None: it did not say)."""
    return bool(pending) and (reported is None or bool(reported & pending))


def reconcile(group: StreamsGroup, member: StreamsMember, owned: Tasks | None,
              owned_standby: Tasks | None = None) -> None:
    """Move ``member`` one step toward its target. ``owned`` / ``owned_standby`` are the active and
    standby tasks its heartbeat reported, or None when it did not say (unchanged since its last)."""
    if member.state is MemberState.UNREVOKED_TASKS:
        if _still_holds(owned, member.pending_revocation) or _still_holds(
                owned_standby, member.pending_standby_revocation):
            return  # still revoking: nothing moves until the member confirms
    elif member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
        return
    target = group.target.get(member.member_id, NO_TASKS)
    target_standby = group.target_standby.get(member.member_id, NO_TASKS)
    keep, keep_standby = member.assigned & target, member.standby & target_standby
    revoke, revoke_standby = member.assigned - keep, member.standby - keep_standby
    wanted, wanted_standby = target - keep, target_standby - keep_standby
    free = frozenset(t for t in wanted if group.owners.get(t, member.member_id) == member.member_id)
    # A standby copy waits while the task is still active in the member's own process (its state
    # directory is the same).
    free_standby = frozenset(t for t in wanted_standby if not _active_in_process(group, member, t))
    if _still_holds(owned, revoke) or _still_holds(owned_standby, revoke_standby):
        group.set_owned(member, keep, revoke)
        member.standby, member.pending_standby_revocation = keep_standby, revoke_standby
        member.state = MemberState.UNREVOKED_TASKS
        return
    group.set_owned(member, keep | free, NO_TASKS)
    member.standby, member.pending_standby_revocation = keep_standby | free_standby, NO_TASKS
    if member.member_epoch != group.assignment_epoch:
        member.previous_member_epoch = member.member_epoch
        member.member_epoch = group.assignment_epoch
    unreleased = (wanted - free) or (wanted_standby - free_standby)
    member.state = MemberState.UNRELEASED_TASKS if unreleased else MemberState.STABLE


def _active_in_process(group: StreamsGroup, member: StreamsMember, task: Task) -> bool:
    owner = group.owners.get(task)
    if owner is None:
        return False
    other = group.members.get(owner)
    return other is not None and other.process == member.process

def validate_commit(sg: StreamsGroup, member_id: str, epoch: int, transactional: bool) -> ErrorCode | None:
    """StreamsGroup.validateOffsetCommit: a negative epoch commits as an admin only while the group
    has no members; otherwise a member, at its current epoch."""
    if epoch < 0 and not sg.members:
        return None
    member = sg.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if epoch != member.member_epoch:
        return ErrorCode.ILLEGAL_GENERATION if transactional else ErrorCode.STALE_MEMBER_EPOCH
    return None
