"""KIP-848 consumer groups: ConsumerGroupHeartbeat, ConsumerGroupDescribe, and the member-epoch
check of OffsetFetch (commits: ``consumer_requests.validate_commit``).

A heartbeat (Kafka's GroupMetadataManager.consumerGroupHeartbeat, in its order; the frame and the
member's join, epoch check, leaving and timers are shared with streams groups in ``modern_groups``):
validate the request (``consumer_requests``); get or create the group (created only by a join,
at epoch 1: ``ConsumerGroup``); find or create the member, dynamic or static, and check its epoch;
apply what changed; bump the group epoch if membership, a subscription or the subscribed topics
changed; compute a new target assignment when the group epoch is ahead of the
assignment epoch (synchronously: the answer already carries it); reconcile the member
(``consumer_state.reconcile``); re-arm its session timer (and the rebalance timer while it has
partitions to revoke). Everything happens within one call on the event loop, so there is one owner;
the answer then waits for the records of what changed (``persist``, ``consumer_records``).

Each error answers with the code and message Kafka 4.3.1 gives for it (checked against it).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from grete.coordinator.groups import consumer_records
from grete.coordinator.groups.consumer_assignors import ASSIGNORS, AssignorMember, TopicView, assign
from grete.coordinator.groups.consumer_requests import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerHeartbeat,
    HeartbeatResult,
    full_match,
    new_member_id,
    validate_request,
)
from grete.coordinator.groups.consumer_state import ConsumerGroup, ConsumerMember, MemberState, reconcile
from grete.coordinator.groups.coordinator_records import Record
from grete.coordinator.groups.group_context import GroupContext, cancel
from grete.coordinator.groups.group_state import Group, GroupState
from grete.coordinator.groups.modern_groups import ModernGroups
from grete.coordinator.groups.modern_state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    GroupRequestError,
)
from grete.protocol.errors import ErrorCode


def _nothing(group: Group, member: ConsumerMember) -> None:
    return None


def _never(group: Group) -> bool:
    return False


class ConsumerGroups(ModernGroups[ConsumerGroup, ConsumerMember, ConsumerHeartbeat, HeartbeatResult]):
    """The consumer-protocol part of the group coordinator, over the shared ``GroupContext``."""

    kind = "consumer"
    held = "partitions"
    session_key = "consumer.session.timeout.ms"
    stable = MemberState.STABLE
    heartbeat_key = "consumer.heartbeat.interval.ms"
    unknown_instance_refused = True

    def __init__(self, ctx: GroupContext) -> None:
        super().__init__(ctx)
        # Set by consumer_classic (online migration): called after a member was removed, and to turn a
        # classic group with members into a consumer group (False: it stays classic).
        self.on_member_removed: Callable[[Group, ConsumerMember], None] = _nothing
        self.upgrade: Callable[[Group], bool] = _never

    # ===================================================================== the kind's hooks

    def _state(self, group: Group) -> ConsumerGroup | None:
        return group.consumer

    def _enabled(self) -> bool:
        return self.ctx.config.consumer_protocol_enabled

    def _answer(self, error: ErrorCode, message: str | None = None) -> HeartbeatResult:
        return HeartbeatResult(error, message)

    def _validate(self, req: ConsumerHeartbeat) -> None:
        validate_request(req, self.ctx.config.consumer_assignors)

    def _changes(self, state: ConsumerGroup) -> list[Record]:
        records = consumer_records.changes(state, state.dirty)
        state.dirty.clear()
        return records

    def _new_member(self, member_id: str, req: ConsumerHeartbeat) -> ConsumerMember:
        return ConsumerMember(member_id, instance_id=req.instance_id)

    def _max_size(self) -> int:
        return self.ctx.config.consumer_max_size

    def _reported(self, req: ConsumerHeartbeat) -> frozenset[Any] | None:
        return req.owned

    def _defaults(self) -> tuple[int, int]:
        return self.ctx.config.consumer_session_timeout_ms, self.ctx.config.consumer_heartbeat_interval_ms

    def _left(self, member: ConsumerMember, req: ConsumerHeartbeat) -> HeartbeatResult:
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, req.member_epoch, 0, None)

    def _removed(self, group: Group, state: ConsumerGroup, member: ConsumerMember) -> None:
        self.on_member_removed(group, member)

    def _cancel_timers(self, member: ConsumerMember) -> None:
        super()._cancel_timers(member)
        cancel(member.sync_timer)
        cancel(member.join_timer)
        member.sync_timer = member.join_timer = None

    def _loaded_session_ms(self, group: Group, member: ConsumerMember) -> int:
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self.session_timeout_ms(group.group_id)

    # ========================================================================== heartbeat

    def _beat(self, req: ConsumerHeartbeat) -> HeartbeatResult:
        group = self._group(req)
        cg = group.consumer
        assert cg is not None
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, cg, req)
        if req.member_epoch == JOIN_EPOCH:
            member, bump = self._join(cg, req.member_id or new_member_id(), req)
        else:
            member = self._known_member(cg, req)
            bump = False
        bump |= self._apply(member, req)
        self.refresh(cg, self.ctx.topic_view(), bump)
        before = member.assigned
        reconcile(cg, member, req.owned)
        cg.dirty.add(member.member_id)
        self._arm_timers(group, member)
        full = req.member_epoch == JOIN_EPOCH or (req.rebalance_timeout_ms != -1 and req.owned is not None and (
            req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, member.member_epoch,
                               self.heartbeat_interval_ms(cg.group_id),
                               member.assigned if full or member.assigned != before else None)

    def refresh(self, cg: ConsumerGroup, view: TopicView, bump: bool) -> None:
        """A new group epoch if ``bump`` or the subscribed topics changed; then a new target
        assignment if the group epoch is ahead of it."""
        subscribed = self._subscribed(cg, view)
        if bump or subscribed != cg.subscribed:
            cg.group_epoch += 1
            cg.subscribed = subscribed
        if cg.group_epoch > cg.assignment_epoch:
            self._compute_target(cg, view)

    def _group(self, req: ConsumerHeartbeat) -> Group:
        group = self.ctx.groups.get(req.group_id)
        if group is not None and group.consumer is not None:
            return group
        if req.member_epoch != JOIN_EPOCH:
            raise GroupRequestError(ErrorCode.UNKNOWN_MEMBER_ID,
                                    f"Member {req.member_id} is not a member of group {req.group_id}.")
        if group is None or group.is_(GroupState.DEAD):
            group = self.ctx.new_group(req.group_id)
        elif group.streams is not None:
            raise GroupRequestError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
        elif not group.is_(GroupState.EMPTY):
            if self.upgrade(group):
                return group
            raise GroupRequestError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
        else:
            self._take_empty_classic(req.group_id)
        group.consumer = ConsumerGroup(req.group_id)
        group.protocol_type = CONSUMER_PROTOCOL_TYPE
        return group

    def replace_static(self, cg: ConsumerGroup, old: ConsumerMember, member_id: str) -> ConsumerMember:
        """A static member back within its session: the new member id takes over the old one's
        assignment and target without a rebalance."""
        assigned, pending = old.assigned, old.pending_revocation
        self._drop(cg, old)
        cg.dirty.add(old.member_id)
        member = ConsumerMember(member_id, instance_id=old.instance_id, rack_id=old.rack_id,
                                subscribed_topic_names=old.subscribed_topic_names,
                                subscribed_topic_regex=old.subscribed_topic_regex,
                                rebalance_timeout_ms=old.rebalance_timeout_ms, server_assignor=old.server_assignor,
                                member_epoch=0, previous_member_epoch=old.previous_member_epoch, classic=old.classic)
        cg.members[member_id] = member
        cg.target[member_id] = cg.target.pop(old.member_id, frozenset())
        if old.instance_id is not None:
            cg.static_members[old.instance_id] = member_id
        cg.set_owned(member, assigned, pending)
        return member

    @staticmethod
    def _apply(member: ConsumerMember, req: ConsumerHeartbeat) -> bool:
        """Take the request's changed fields; True if the subscription changed (a new group epoch)."""
        before = (member.rack_id, member.subscribed_topic_names, member.subscribed_topic_regex,
                  member.server_assignor)
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None:
            member.subscribed_topic_names = tuple(sorted(set(req.subscribed_topic_names)))
        if req.subscribed_topic_regex is not None:
            member.subscribed_topic_regex = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        return before != (member.rack_id, member.subscribed_topic_names, member.subscribed_topic_regex,
                          member.server_assignor)

    # ================================================================== target assignment

    @staticmethod
    def _subscribed(cg: ConsumerGroup, view: TopicView) -> dict[str, tuple[uuid.UUID, int]]:
        """The existing topics the members subscribe to, by name or by regex, with their id and size."""
        names: set[str] = set()
        patterns: set[str] = set()
        for m in cg.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                patterns.add(m.subscribed_topic_regex)
        for pattern in patterns:
            names.update(n for n in view if full_match(pattern, n))
        return {n: view[n] for n in sorted(names) if n in view}

    def _member_topics(self, member: ConsumerMember, view: TopicView) -> frozenset[str]:
        topics = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            topics.update(n for n in view if full_match(member.subscribed_topic_regex, n))
        return frozenset(topics)

    def _compute_target(self, cg: ConsumerGroup, view: TopicView) -> None:
        """The server-side assignor's answer for the current group epoch: the assignor most members
        asked for, else the first of group.consumer.assignors."""
        wished = Counter(m.server_assignor for m in cg.members.values() if m.server_assignor)
        assignor = wished.most_common(1)[0][0] if wished else self.ctx.config.consumer_assignors[0]
        members = [AssignorMember(m.member_id, self._member_topics(m, view), cg.target.get(m.member_id, frozenset()))
                   for m in cg.members.values()]
        cg.target = assign(assignor if assignor in ASSIGNORS else ASSIGNORS[0], members, view)
        cg.dirty.update(cg.target)
        cg.assignor = assignor
        cg.assignment_epoch = cg.group_epoch
