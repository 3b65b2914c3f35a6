"""The classic rebalance protocol's state machine and its timers: PreparingRebalance (with
group.initial.rebalance.delay.ms for a group leaving Empty), the join deadline, the next generation
and the answers to the parked JoinGroups, the SyncGroup deadline, members' session timers, pending
members (KIP-394), members leaving or timing out. Membership (group_membership.py) answers the
requests that drive it."""

from __future__ import annotations

from collections.abc import Awaitable

from grete.coordinator.groups.group_context import GroupContext, cancel, log
from grete.coordinator.groups.group_state import Group, GroupState, Member
from grete.coordinator.groups.group_types import UNKNOWN_MEMBER_ID, JoinResult, SyncResult
from grete.protocol.errors import ErrorCode

EMPTY = GroupState.EMPTY
PREPARING = GroupState.PREPARING_REBALANCE
COMPLETING = GroupState.COMPLETING_REBALANCE
STABLE = GroupState.STABLE


class Rebalance:
    """The classic group's rebalance over the shared ``GroupContext``."""

    def __init__(self, ctx: GroupContext) -> None:
        self.ctx = ctx

    # --- pending members (KIP-394) ----------------------------------------------------------------
    def add_pending_member(self, group: Group, member_id: str, session_timeout_ms: int) -> None:
        group.pending_members[member_id] = self.ctx.call_later(
            session_timeout_ms, self._on_pending_member_expired, group, member_id)

    def _on_pending_member_expired(self, group: Group, member_id: str) -> None:
        if self.ctx.live_group(group) and member_id in group.pending_members:
            log.info("group %s: pending member %s expired", group.group_id, member_id)
            self.remove_pending_member(group, member_id)

    def remove_pending_member(self, group: Group, member_id: str) -> None:
        cancel(group.pending_members.pop(member_id, None))
        if group.is_(PREPARING):
            self.try_complete_join(group)

    # --- the join phase ---------------------------------------------------------------------------
    def maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(group, reason)

    def prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(COMPLETING):
            # Members parked in SyncGroup must rejoin instead.
            self.reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS)
        cancel(group.sync_timer)
        group.sync_timer = None
        was_empty = group.is_(EMPTY)
        group.transition_to(PREPARING, self.ctx.now_ms())
        group.last_rebalance_reason = reason
        log.info("group %s: preparing to rebalance in generation %d: %s", group.group_id, group.generation_id, reason)
        if was_empty:
            delay = self.ctx.config.group_initial_rebalance_delay_ms
            self._schedule_initial_join(group, delay, max(group.rebalance_timeout_ms() - delay, 0))
        else:
            self._schedule_join_deadline(group, group.rebalance_timeout_ms())
            self.try_complete_join(group)

    def _schedule_initial_join(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        cancel(group.join_timer)
        group.initial_delay_active = True
        group.join_timer = self.ctx.call_later(delay_ms, self._on_initial_delay, group, delay_ms, remaining_ms)

    def _on_initial_delay(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        group.join_timer = None
        if not self.ctx.live_group(group) or not group.is_(PREPARING):
            return
        if group.new_member_added and remaining_ms != 0:
            # Kafka's InitialDelayedJoin: wait another delay while members keep arriving, but never
            # beyond the rebalance timeout in total.
            group.new_member_added = False
            next_delay = min(self.ctx.config.group_initial_rebalance_delay_ms, remaining_ms)
            self._schedule_initial_join(group, next_delay, max(remaining_ms - delay_ms, 0))
            return
        group.initial_delay_active = False
        self._complete_join(group)

    def _schedule_join_deadline(self, group: Group, timeout_ms: int) -> None:
        cancel(group.join_timer)
        group.initial_delay_active = False
        group.join_timer = self.ctx.call_later(timeout_ms, self._on_join_deadline, group)

    def _on_join_deadline(self, group: Group) -> None:
        group.join_timer = None
        if self.ctx.live_group(group) and group.is_(PREPARING):
            self._complete_join(group)

    def try_complete_join(self, group: Group) -> None:
        if group.is_(PREPARING) and not group.initial_delay_active and group.has_all_members_joined():
            cancel(group.join_timer)
            group.join_timer = None
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """End of the join phase: evict dynamic members that did not rejoin, start the next
        generation and answer every parked JoinGroup (the leader gets all members' metadata)."""
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info("group %s: removing member %s, which did not rejoin in time", group.group_id, member.member_id)
                self.drop_member(group, member.member_id)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that have not rejoined are left: give them another round.
            log.warning("group %s: no member rejoined; waiting another rebalance timeout", group.group_id)
            self._schedule_join_deadline(group, group.rebalance_timeout_ms())
            return
        group.init_next_generation(self.ctx.now_ms())
        if group.is_(EMPTY):
            log.info("group %s: generation %d is empty", group.group_id, group.generation_id)
            self.ctx.spawn(self._log_write_failure(group, self.ctx.store_group(group, {})))
            return
        log.info("group %s: generation %d with %d members, protocol %s", group.group_id,
                 group.generation_id, len(group.members), group.protocol_name)
        everyone = group.current_member_metadata()
        for member in group.members.values():
            leads = group.is_leader(member.member_id)
            result = JoinResult(ErrorCode.NONE, group.generation_id, group.protocol_type, group.protocol_name,
                                group.leader_id or "", member.member_id, False, everyone if leads else [])
            group.complete_join(member, result)
            self.schedule_session(group, member, member.session_timeout_ms)
            member.is_new = False
        self.schedule_pending_sync(group)

    async def _log_write_failure(self, group: Group, write: Awaitable[ErrorCode]) -> None:
        error = await write
        if error is not ErrorCode.NONE:
            # Safe to only warn: the previous generation on disk has members that will time out.
            log.warning("group %s: could not write empty generation %d: %s", group.group_id,
                        group.generation_id, error.name)

    # --- the sync phase ---------------------------------------------------------------------------
    def schedule_pending_sync(self, group: Group) -> None:
        cancel(group.sync_timer)
        group.sync_timer = self.ctx.call_later(group.rebalance_timeout_ms(), self._on_sync_deadline, group,
                                           group.generation_id)

    def _on_sync_deadline(self, group: Group, generation_id: int) -> None:
        group.sync_timer = None
        if not self.ctx.live_group(group) or generation_id != group.generation_id:
            return
        if group.state in (COMPLETING, STABLE) and group.pending_sync:
            missing = sorted(group.pending_sync)
            log.info("group %s: removing %s, which did not send SyncGroup in time", group.group_id, missing)
            group.pending_sync.clear()
            for member_id in missing:
                self.drop_member(group, member_id)
            self.prepare_rebalance(group, f"removing {missing} on pending sync expiration")

    def reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self.propagate_assignment(group, error)

    def propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        ok = error is ErrorCode.NONE
        for member in group.members.values():
            result = SyncResult(error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                                member.assignment)
            if group.complete_sync(member, result):
                # Sessions did not run down while parked; start the clock again now.
                self.schedule_session(group, member, member.session_timeout_ms)

    # --- members leaving --------------------------------------------------------------------------
    def drop_member(self, group: Group, member_id: str) -> Member | None:
        """Take a member out without touching the group's state; answer anything it has parked."""
        member = group.members.get(member_id)
        if member is None:
            return None
        group.complete_join(member, JoinResult.failed(UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID))
        group.complete_sync(member, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)
        cancel(member.session_timer)
        member.session_timer = None
        return member

    def remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        self.drop_member(group, member.member_id)
        if group.state in (STABLE, COMPLETING):
            self.maybe_prepare_rebalance(group, reason)
        elif group.is_(PREPARING):
            self.try_complete_join(group)

    # --- session timers ---------------------------------------------------------------------------
    def downgraded(self, group: Group) -> None:
        """A consumer group just became this classic group (online downgrade): its members' sessions
        start and a rebalance begins, which they learn of from their next heartbeat."""
        for member in group.members.values():
            self.schedule_session(group, member, member.session_timeout_ms)
        self.prepare_rebalance(group, "downgrade from the consumer protocol")

    def schedule_session(self, group: Group, member: Member, timeout_ms: int) -> None:
        cancel(member.session_timer)
        member.session_timer = self.ctx.call_later(timeout_ms, self._on_session_expired, group, member)

    def _on_session_expired(self, group: Group, member: Member) -> None:
        member.session_timer = None
        if not self.ctx.live_group(group) or group.members.get(member.member_id) is not member:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # parked in a rebalance: the timer restarts when the rebalance step completes
        log.info("group %s: member %s session expired", group.group_id, member.member_id)
        self.remove_member_and_update_group(group, member, f"member {member.member_id} session expired")

    def unload_group(self, group: Group) -> None:
        """The group is no longer served here: stop its timers and answer whatever its members have
        parked with NOT_COORDINATOR, which sends them to look for the new coordinator."""
        cancel(group.join_timer)
        cancel(group.sync_timer)
        group.join_timer = group.sync_timer = None
        for m in group.consumer.members.values() if group.consumer is not None else ():
            for timer in (m.session_timer, m.rebalance_timer, m.sync_timer, m.join_timer):
                cancel(timer)
        for handle in group.pending_members.values():
            cancel(handle)
        for member in group.members.values():
            cancel(member.session_timer)
            member.session_timer = None
            group.complete_join(member, JoinResult.failed(member.member_id, ErrorCode.NOT_COORDINATOR))
            group.complete_sync(member, SyncResult(ErrorCode.NOT_COORDINATOR))

    def touch_member(self, group: Group, member_id: str) -> None:
        """A sign of life from the member: restart its session timer."""
        member = group.members.get(member_id)
        if member is not None:
            self.schedule_session(group, member, member.session_timeout_ms)
