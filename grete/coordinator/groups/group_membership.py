"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the classic rebalance protocol.

The flow follows Kafka's classic GroupCoordinator:

* A JoinGroup that must wait for the rebalance gets a future that is parked on the member
  (``member.join_future``) and completed when the join phase ends: when every known member has
  rejoined and no MEMBER_ID_REQUIRED member is pending, or when the rebalance timeout (the largest
  rebalance.timeout.ms of the members) expires, which evicts dynamic members that did not rejoin.
  A group leaving Empty waits group.initial.rebalance.delay.ms first, extended by the same delay
  each time a new member arrives, up to the rebalance timeout.
* Followers' SyncGroup requests park on ``member.sync_future`` until the leader's assignment has
  been written to ``__consumer_offsets``. Members that never send SyncGroup are evicted after the
  rebalance timeout.
* Each member has one session timer (``loop.call_later``) that heartbeats, joins, syncs and commits
  push back. It removes the member when it fires, except while the member is parked in a join or a
  sync (a brand-new member is removed after ``new_member_join_timeout_ms`` even then).

The requests are answered here; the rebalance state machine and its timers are group_rebalance.py's.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from functools import partial

from grete.coordinator.groups.consumer_records import tombstones
from grete.coordinator.groups.group_context import GROUP_WRITE_ERRORS, GroupContext, cancel, log
from grete.coordinator.groups.group_rebalance import Rebalance
from grete.coordinator.groups.group_state import Group, GroupState, Member
from grete.coordinator.groups.group_types import UNKNOWN_MEMBER_ID, JoinResult, LeaveMember, SyncResult
from grete.protocol.errors import ErrorCode

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

Protocols = list[tuple[str, bytes]]
JoinOutcome = JoinResult | asyncio.Future[JoinResult]


class Membership:
    """The classic rebalance protocol over the shared ``GroupContext``."""

    def __init__(self, ctx: GroupContext) -> None:
        self.ctx = ctx
        self.rebalance = Rebalance(ctx)

    # --- JoinGroup --------------------------------------------------------------------------------
    async def join_group(self, *, group_id: str, member_id: str, group_instance_id: str | None,
                         client_id: str, client_host: str, session_timeout_ms: int,
                         rebalance_timeout_ms: int, protocol_type: str, protocols: Protocols,
                         require_known_member_id: bool, reason: str | None,
                         supports_skip_assignment: bool = False) -> JoinResult:
        """JoinGroup. ``require_known_member_id`` is true for JoinGroup v4+; ``supports_skip_assignment``
        for v9+ (KIP-814), which changes what a replaced static leader is told. Handlers pass
        ``session_timeout_ms`` as the rebalance timeout for v0, which has none."""
        error = self.ctx.status_error(group_id)
        if error is not None:
            return JoinResult.failed(member_id, error)
        if not (self.ctx.config.group_min_session_timeout_ms <= session_timeout_ms
                <= self.ctx.config.group_max_session_timeout_ms):
            return JoinResult.failed(member_id, ErrorCode.INVALID_SESSION_TIMEOUT)
        is_unknown = member_id == UNKNOWN_MEMBER_ID
        group = self.ctx.groups.get(group_id)
        if group is None:
            if not is_unknown:
                return JoinResult.failed(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
            group = self.ctx.new_group(group_id)
        if group.consumer is not None:
            if group.consumer.members:
                # A KIP-848 group with members while the migration policy is disabled (otherwise
                # GroupCoordinator hands the join to consumer_classic).
                return JoinResult.failed(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
            # An empty group may change its type (its offsets stay); its consumer-group records go,
            # or a restart would bring the consumer group back.
            records = tombstones(group.consumer)
            group.consumer = None
            group.protocol_type = None
            if records:
                self.ctx.spawn(self.ctx.append(self.ctx.partition_for(group_id), records, GROUP_WRITE_ERRORS))
        if not self._accept_joining_member(group, member_id):
            self.rebalance.drop_member(group, member_id)
            self.rebalance.try_complete_join(group)
            return JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED)
        request = _JoinRequest(group_instance_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                               protocol_type, list(protocols), reason or "not provided", supports_skip_assignment)
        if is_unknown:
            outcome = self._join_new_member(group, request, require_known_member_id)
        else:
            outcome = self._join_current_member(group, member_id, request)
        if group.is_(PREPARING):
            self.rebalance.try_complete_join(group)
        if isinstance(outcome, JoinResult):
            return outcome
        # shield: a handler cancelled because its client went away must not cancel the parked
        # future; like Kafka, the member stays "awaiting join" until the phase completes.
        return await asyncio.shield(outcome)

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        """Kafka's group.max.size rule: while preparing, count members that already rejoined (so the
        last ones to rejoin are shed if the limit was lowered); otherwise count all members."""
        limit = self.ctx.config.group_max_size
        if group.state in (EMPTY, DEAD):
            return True
        member = group.members.get(member_id)
        if group.is_(PREPARING):
            return (member is not None and member.awaiting_join) or group.num_awaiting_join < limit
        return member is not None or len(group.members) < limit

    def _join_new_member(self, group: Group, req: _JoinRequest, require_known_member_id: bool) -> JoinOutcome:
        if group.is_(DEAD):
            return JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, [name for name, _ in req.protocols]):
            return JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        # Kafka names static members after their instance id, dynamic ones after the client id.
        new_member_id = f"{req.group_instance_id or req.client_id}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            old_member_id = group.static_members.get(req.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(group, old_member_id, new_member_id, req)
            return self._add_member_and_rebalance(group, new_member_id, req)
        if require_known_member_id:
            # KIP-394: hand out the id first; the member is counted (and holds the rebalance) only
            # once it rejoins with it, within its session timeout.
            self.rebalance.add_pending_member(group, new_member_id, req.session_timeout_ms)
            return JoinResult.failed(new_member_id, ErrorCode.MEMBER_ID_REQUIRED)
        return self._add_member_and_rebalance(group, new_member_id, req)

    def _join_current_member(self, group: Group, member_id: str, req: _JoinRequest) -> JoinOutcome:
        if group.is_(DEAD):
            return JoinResult.failed(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(req.protocol_type, [name for name, _ in req.protocols]):
            return JoinResult.failed(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if member_id in group.pending_members:
            if req.group_instance_id is not None:
                # Pending ids are only handed to dynamic members; a static member cannot own one.
                return JoinResult.failed(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
            return self._add_member_and_rebalance(group, member_id, req)
        error = self.validate_current_member(group, member_id, req.group_instance_id)
        if error is not None:
            return JoinResult.failed(member_id, error)
        member = group.members[member_id]
        if group.is_(PREPARING):
            return self._update_member_and_rebalance(group, member, req, f"member {member_id} joining")
        if group.is_(COMPLETING):
            if member.matches(req.protocols):
                # Probably a retry after a lost response: answer with the current generation.
                return self._current_generation(group, member_id)
            return self._update_member_and_rebalance(group, member, req, f"member {member_id} changed metadata")
        if group.is_(STABLE):
            if group.is_leader(member_id):
                # A leader's rejoin asks for a new assignment (e.g. topic metadata changed).
                return self._update_member_and_rebalance(group, member, req, f"leader {member_id} rejoining")
            if not member.matches(req.protocols):
                return self._update_member_and_rebalance(group, member, req, f"member {member_id} changed metadata")
            return self._current_generation(group, member_id)
        return JoinResult.failed(member_id, ErrorCode.UNKNOWN_MEMBER_ID)

    def _current_generation(self, group: Group, member_id: str) -> JoinResult:
        return JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", member_id, False,
                          group.current_member_metadata() if group.is_leader(member_id) else [])

    def validate_current_member(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """A static member's instance id must map to this member id (else it is fenced), and the
        member id must be in the group."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                log.info("group %s: member %s with instance id %s is fenced by %s",
                         group.group_id, member_id, instance_id, current)
                return ErrorCode.FENCED_INSTANCE_ID
        return None if group.has(member_id) else ErrorCode.UNKNOWN_MEMBER_ID

    def _add_member_and_rebalance(self, group: Group, member_id: str, req: _JoinRequest) -> JoinOutcome:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, req.protocols, is_new=True)
        if group.is_(PREPARING) and group.generation_id == 0:
            group.new_member_added = True  # extends the initial rebalance delay
        cancel(group.pending_members.get(member_id))
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.add(member, future)
        # A new member cannot heartbeat while its JoinGroup is parked, so bound the wait instead.
        self.rebalance.schedule_session(group, member, self.ctx.config.new_member_join_timeout_ms)
        self.rebalance.maybe_prepare_rebalance(group, f"adding new member {member_id} ({req.reason})")
        return future

    def _update_member_and_rebalance(self, group: Group, member: Member, req: _JoinRequest,
                                     why: str) -> JoinOutcome:
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, future)
        self.rebalance.maybe_prepare_rebalance(group, f"{why} ({req.reason})")
        return future

    def _replace_static_member(self, group: Group, old_id: str, new_id: str, req: _JoinRequest) -> JoinOutcome:
        """KIP-345: a static member that restarts takes over its instance id with a new member id. The
        old id is fenced. A Stable group keeps its assignment (no rebalance) unless the protocol the
        group would select changes."""
        assert req.group_instance_id is not None
        old_leader = group.leader_id
        member = group.replace_static_member(req.group_instance_id, old_id, new_id)
        self.rebalance.schedule_session(group, member, member.session_timeout_ms)
        previous = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, future)
        why = f"static member {req.group_instance_id} rejoined as {new_id} ({req.reason})"
        if group.is_(STABLE):
            if group.protocol_name == group.select_protocol():
                assignment = {m.member_id: m.assignment for m in group.members.values()}
                write = self.ctx.store_group(group, assignment)
                self.ctx.spawn(self._finish_static_replacement(group, member, old_id, old_leader, previous, write,
                                                           req.supports_skip_assignment))
            else:
                self.rebalance.maybe_prepare_rebalance(group, why)
        elif group.is_(COMPLETING):
            # The leader may already be assigning to the old id: start over so nobody is left out.
            self.rebalance.prepare_rebalance(group, why)
        return future

    async def _finish_static_replacement(self, group: Group, member: Member, old_id: str, old_leader: str | None,
                                         previous: tuple[Protocols, int, int], write: Awaitable[ErrorCode],
                                         supports_skip_assignment: bool) -> None:
        error = await write
        new_id = member.member_id
        if group.members.get(new_id) is not member:
            return  # fenced or removed meanwhile; its future was answered then
        if error is not ErrorCode.NONE:
            # Could not persist the new member id: undo, so the old id stays valid.
            group.complete_join(member, JoinResult.failed(new_id, error))
            protocols, rebalance_timeout, session_timeout = previous
            group.update_member(member, protocols, rebalance_timeout, session_timeout, None)
            assert member.group_instance_id is not None
            group.replace_static_member(member.group_instance_id, new_id, old_id)
            self.rebalance.schedule_session(group, member, member.session_timeout_ms)
            return
        is_leader = group.is_leader(new_id)
        if supports_skip_assignment:
            # KIP-814: tell a replaced leader it leads, with the members, but must not reassign.
            result = JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                                group.leader_id or "", new_id, is_leader,
                                group.current_member_metadata() if is_leader else [])
        else:
            # Older clients: report the OLD leader id so a replaced leader does not think it leads
            # and compute an assignment a Stable group would never distribute.
            result = JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                                old_leader or "", new_id, False, [])
        group.complete_join(member, result)

    # --- SyncGroup --------------------------------------------------------------------------------
    async def sync_group(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
                         protocol_type: str | None, protocol_name: str | None,
                         assignments: list[tuple[str, bytes]]) -> SyncResult:
        """SyncGroup. ``protocol_type``/``protocol_name`` are None before v5 (not checked then)."""
        error = self.ctx.status_error(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance state was lost with the old coordinator: make the member rejoin.
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        if error is not None:
            return SyncResult(error)
        group = self.ctx.groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        error = self._validate_sync(group, generation_id, member_id, group_instance_id, protocol_type, protocol_name)
        if error is not None:
            return SyncResult(error)
        if group.is_(EMPTY):
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if group.is_(PREPARING):
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        if group.is_(STABLE):
            self.rebalance.schedule_session(group, member, member.session_timeout_ms)
            return SyncResult(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        group.complete_sync(member, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))  # a duplicate SyncGroup
        member.sync_future = future
        if group.is_leader(member_id):
            # The write runs on its own (a leader that went away must not stop it half-applied); the
            # leader is answered as the other members are, when the assignment is propagated: in the
            # same loop step and first, not a task switch after members that synced behind it.
            writing = self.ctx.spawn(self._apply_leader_assignment(group, dict(assignments)))
            writing.add_done_callback(partial(_fail_sync, future))
        return await asyncio.shield(future)

    def _validate_sync(self, group: Group, generation_id: int, member_id: str, instance_id: str | None,
                       protocol_type: str | None, protocol_name: str | None) -> ErrorCode | None:
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.validate_current_member(group, member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if protocol_type is not None and protocol_type != group.protocol_type:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if protocol_name is not None and protocol_name != group.protocol_name:
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return None

    async def _apply_leader_assignment(self, group: Group, given: dict[str, bytes]) -> None:
        if not self.ctx.live_group(group) or not group.is_(COMPLETING):
            return  # the group moved on before this task ran; that rebalance answers everyone
        # Members the leader left out get an empty assignment, as in Kafka.
        assignment = {member_id: given.get(member_id, b"") for member_id in group.members}
        generation = group.generation_id
        error = await self.ctx.store_group(group, assignment)
        if not self.ctx.live_group(group) or not group.is_(COMPLETING) or group.generation_id != generation:
            return  # a member joined or left while we were writing: that rebalance answers everyone
        if error is not ErrorCode.NONE:
            self._keep_generation_after_write_error(group, error)
            return
        for member in group.members.values():
            member.assignment = assignment[member.member_id]
        self.rebalance.propagate_assignment(group, ErrorCode.NONE)
        group.transition_to(STABLE, self.ctx.now_ms())

    def _keep_generation_after_write_error(self, group: Group, error: ErrorCode) -> None:
        """The assignment could not be written: every parked SyncGroup gets Kafka's code for the
        failure, but unlike Kafka (which prepares a new rebalance here) the group stays in this
        generation. Nothing was written, so the generation is still good; members that rejoin get it
        back unchanged and sync again, which retries the write. Rebalancing instead made a
        coordinator that cannot write bump a generation on every client retry, thousands a second.
        Members that do not sync again in time are removed as after any rebalance."""
        log.info("group %s: could not write the assignment of generation %d: %s; members must sync again",
                 group.group_id, group.generation_id, error.name)
        self.rebalance.reset_and_propagate_assignment_error(group, error)
        group.pending_sync = set(group.members)
        self.rebalance.schedule_pending_sync(group)

    # --- Heartbeat --------------------------------------------------------------------------------
    async def heartbeat(self, *, group_id: str, generation_id: int, member_id: str,
                        group_instance_id: str | None) -> ErrorCode:
        error = self.ctx.status_error(group_id)
        if error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return ErrorCode.NONE  # Kafka answers blindly while loading
        if error is not None:
            return error
        group = self.ctx.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self.validate_current_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if group.is_(EMPTY):
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.rebalance.touch_member(group, member_id)
        return ErrorCode.REBALANCE_IN_PROGRESS if group.is_(PREPARING) else ErrorCode.NONE

    # --- LeaveGroup -------------------------------------------------------------------------------
    async def leave_group(self, *, group_id: str,
                          members: list[LeaveMember]) -> tuple[ErrorCode, list[tuple[LeaveMember, ErrorCode]]]:
        """LeaveGroup (batch, v3+). Before v3 the handler sends one member and answers with that
        member's error as the top-level error. A member may be named by group_instance_id alone
        (administrative removal, KIP-345)."""
        error = self.ctx.status_error(group_id)
        if error is not None:
            return error, []
        group = self.ctx.groups.get(group_id)
        if group is None:
            return ErrorCode.NONE, [(m, ErrorCode.UNKNOWN_MEMBER_ID) for m in members]
        if group.is_(DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, []
        return ErrorCode.NONE, [(m, self._leave_one(group, m)) for m in members]

    def _leave_one(self, group: Group, leaving: LeaveMember) -> ErrorCode:
        reason = leaving.reason or "not provided"
        if leaving.member_id == UNKNOWN_MEMBER_ID:
            current = group.static_members.get(leaving.group_instance_id) if leaving.group_instance_id else None
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._leave(group, group.members[current], reason)
            return ErrorCode.NONE
        if leaving.member_id in group.pending_members:
            self.rebalance.remove_pending_member(group, leaving.member_id)
            return ErrorCode.NONE
        error = self.validate_current_member(group, leaving.member_id, leaving.group_instance_id)
        if error is not None:
            return error
        self._leave(group, group.members[leaving.member_id], reason)
        return ErrorCode.NONE

    def _leave(self, group: Group, member: Member, reason: str) -> None:
        log.info("group %s: member %s left (%s)", group.group_id, member.member_id, reason)
        self.rebalance.remove_member_and_update_group(group, member, f"member {member.member_id} left ({reason})")

    # ====================================================================== the rebalance's parts
    def downgraded(self, group: Group) -> None:
        self.rebalance.downgraded(group)

    def schedule_session(self, group: Group, member: Member, timeout_ms: int) -> None:
        self.rebalance.schedule_session(group, member, timeout_ms)

    def touch_member(self, group: Group, member_id: str) -> None:
        self.rebalance.touch_member(group, member_id)

    def unload_group(self, group: Group) -> None:
        self.rebalance.unload_group(group)

    def remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self.rebalance.remove_member_and_update_group(group, member, reason)


class _JoinRequest:
    """The parts of a JoinGroup request the helpers pass around."""

    __slots__ = ("group_instance_id", "client_id", "client_host", "session_timeout_ms", "rebalance_timeout_ms",
                 "protocol_type", "protocols", "reason", "supports_skip_assignment")

    def __init__(self, group_instance_id: str | None, client_id: str, client_host: str, session_timeout_ms: int,
                 rebalance_timeout_ms: int, protocol_type: str, protocols: Protocols, reason: str,
                 supports_skip_assignment: bool) -> None:
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.reason = reason
        self.supports_skip_assignment = supports_skip_assignment


def _fail_sync(future: asyncio.Future[SyncResult], writing: asyncio.Task[None]) -> None:
    """The leader's assignment write failed unexpectedly: its SyncGroup fails with it (answered
    UNKNOWN_SERVER_ERROR) instead of waiting for an answer nothing will give."""
    if not writing.cancelled() and writing.exception() is not None and not future.done():
        future.set_exception(writing.exception())  # type: ignore[arg-type]
