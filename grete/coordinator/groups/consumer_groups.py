"""KIP-848 consumer groups: ConsumerGroupHeartbeat, ConsumerGroupDescribe, and the member-epoch
check of OffsetFetch (commits: ``consumer_requests.validate_commit``).

A heartbeat (Kafka's GroupMetadataManager.consumerGroupHeartbeat, in its order): validate the request
(``consumer_requests``);
get or create the group (created only by a join, epoch 0); find or create the member, dynamic or
static, and check its epoch; apply what changed; bump the group epoch if membership, a subscription or
the subscribed topics changed; compute a new target assignment when the group epoch is ahead of the
assignment epoch (synchronously: the answer already carries it); reconcile the member
(``consumer_state.reconcile``); re-arm its session timer (and the rebalance timer while it has
partitions to revoke). Everything happens within one call on the event loop, so there is one owner;
the answer then waits for the records of what changed (``persist``, ``consumer_records``).

Each error answers with the code and message Kafka 4.3.1 gives for it (checked against it).
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Callable

from grete.coordinator.groups import consumer_records
from grete.coordinator.groups.consumer_assignors import ASSIGNORS, AssignorMember, TopicView, assign
from grete.coordinator.groups.consumer_requests import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerHeartbeat,
    HeartbeatError,
    HeartbeatResult,
    full_match,
    new_member_id,
    validate_request,
)
from grete.coordinator.groups.consumer_state import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    reconcile,
)
from grete.coordinator.groups.coordinator_records import Record
from grete.coordinator.groups.group_context import (
    GROUP_WRITE_ERRORS,
    GroupContext,
    arm_member_timers,
    cancel,
    log,
)
from grete.coordinator.groups.group_state import Group, GroupState
from grete.coordinator.groups.offsets_format import encode_group_key
from grete.protocol.errors import ErrorCode


def _nothing(group: Group, member: ConsumerMember) -> None:
    return None


def _never(group: Group) -> bool:
    return False


class ConsumerGroups:
    """The consumer-protocol part of the group coordinator, over the shared ``GroupContext``."""

    def __init__(self, ctx: GroupContext) -> None:
        self.ctx = ctx
        # Set by consumer_classic (online migration): called after a member was removed, and to turn a
        # classic group with members into a consumer group (False: it stays classic).
        self.on_member_removed: Callable[[Group, ConsumerMember], None] = _nothing
        self.upgrade: Callable[[Group], bool] = _never

    # ====================================================================== configuration

    def _setting(self, group_id: str, key: str, default: int) -> int:
        value = self.ctx.group_overrides(group_id).get(key)
        return int(value) if value is not None else default

    def session_timeout_ms(self, group_id: str) -> int:
        return self._setting(group_id, "consumer.session.timeout.ms", self.ctx.config.consumer_session_timeout_ms)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self._setting(group_id, "consumer.heartbeat.interval.ms",
                             self.ctx.config.consumer_heartbeat_interval_ms)

    # ========================================================================== heartbeat

    async def heartbeat(self, req: ConsumerHeartbeat) -> HeartbeatResult:
        """The state changes at once; the answer waits until the records saying so are written (a
        failed write answers with Kafka's mapping of the log's error)."""
        if not self.ctx.config.consumer_protocol_enabled:
            return HeartbeatResult(ErrorCode.UNSUPPORTED_VERSION,
                                   "The consumer protocol is not in group.coordinator.rebalance.protocols.")
        try:
            validate_request(req, self.ctx.config.consumer_assignors)
            status = self.ctx.status_error(req.group_id)
            if status is not None:
                return HeartbeatResult(status)
            result = self._heartbeat(req)
        except HeartbeatError as exc:
            return HeartbeatResult(exc.error, exc.message)
        error = await self.ctx.detached(self.persist(req.group_id))
        return result if error is ErrorCode.NONE else HeartbeatResult(error)

    async def persist(self, group_id: str) -> ErrorCode:
        """Append the group's changed records, in the order the changes were made: each write waits
        for the one before it on the same partition."""
        group = self.ctx.groups.get(group_id)
        records = self._changes(group.consumer) if group is not None and group.consumer is not None else []
        return await self.ctx.append_in_order(self.ctx.partition_for(group_id), records)

    @staticmethod
    def _changes(cg: ConsumerGroup) -> list[Record]:
        records = consumer_records.changes(cg, cg.dirty)
        cg.dirty.clear()
        return records

    def _heartbeat(self, req: ConsumerHeartbeat) -> HeartbeatResult:
        group = self._group(req)
        cg = group.consumer
        assert cg is not None
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, cg, req)
        if req.member_epoch == 0:
            member, bump = self._join(cg, req)
        else:
            member = self._known_member(cg, req)
            bump = False
        bump |= self._apply(member, req)
        self.refresh(cg, self.ctx.topic_view(), bump)
        before = member.assigned
        reconcile(cg, member, req.owned)
        cg.dirty.add(member.member_id)
        self._arm_timers(group, cg, member)
        full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1 and req.owned is not None and (
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
        if req.member_epoch != 0:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {req.group_id}.")
        if group is None or group.is_(GroupState.DEAD):
            group = self.ctx.new_group(req.group_id)
        elif group.streams is not None:
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
        elif not group.is_(GroupState.EMPTY):
            if self.upgrade(group):
                return group
            raise HeartbeatError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group.")
        else:
            # An empty classic group becomes a consumer group (its offsets stay); its classic record
            # goes, so a restart cannot bring the classic group back.
            self.ctx.spawn(self.ctx.append(self.ctx.partition_for(req.group_id),
                                           [(encode_group_key(req.group_id), None)], GROUP_WRITE_ERRORS))
        group.consumer = ConsumerGroup(req.group_id)
        group.protocol_type = CONSUMER_PROTOCOL_TYPE
        return group

    def _join(self, cg: ConsumerGroup, req: ConsumerHeartbeat) -> tuple[ConsumerMember, bool]:
        member_id = req.member_id or new_member_id()
        if req.instance_id is not None:
            owner_id = cg.static_members.get(req.instance_id)
            if owner_id is not None and owner_id != member_id:
                old = cg.members[owner_id]
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    raise HeartbeatError(
                        ErrorCode.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {req.instance_id} cannot join the group "
                        f"because the instance id is owned by {owner_id} member.")
                return self.replace_static(cg, old, member_id), False
        member = cg.members.get(member_id)
        if member is not None:
            # A known member rejoining owns nothing now (TopicPartitions is empty): start it over.
            cg.release(member)
            member.member_epoch, member.state = 0, MemberState.STABLE
            return member, False
        limit = self.ctx.config.consumer_max_size
        if len(cg.members) >= limit:
            raise HeartbeatError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of {limit} members.")
        member = ConsumerMember(member_id, instance_id=req.instance_id)
        cg.members[member_id] = member
        if req.instance_id is not None:
            cg.static_members[req.instance_id] = member_id
        return member, True

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

    def _known_member(self, cg: ConsumerGroup, req: ConsumerHeartbeat) -> ConsumerMember:
        if req.instance_id is not None:
            owner_id = cg.static_members.get(req.instance_id)
            if owner_id is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if owner_id != req.member_id:
                raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                     f"Static member {req.member_id} with instance id {req.instance_id} was "
                                     f"fenced by member {owner_id}.")
        member = cg.members.get(req.member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {cg.group_id}.")
        self._check_epoch(member, req)
        return member

    @staticmethod
    def _check_epoch(member: ConsumerMember, req: ConsumerHeartbeat) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: an older epoch passes only if it is the
        previous one and the member owns no more than it is assigned (its last answer was lost)."""
        received, known = req.member_epoch, member.member_epoch
        if received > known:
            relation = "greater"
        elif received < known and (received != member.previous_member_epoch or req.owned is None
                                   or not req.owned <= member.assigned):
            relation = "smaller"
        else:
            return
        raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a {relation} member epoch ({received}) than the one "
                             f"known by the group coordinator ({known}). The member must abandon all its "
                             "partitions and rejoin.")

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

    # ============================================================================= leaving

    def _leave(self, group: Group, cg: ConsumerGroup, req: ConsumerHeartbeat) -> HeartbeatResult:
        member = cg.members.get(req.member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {cg.group_id}.")
        if req.instance_id is not None and cg.static_members.get(req.instance_id) != member.member_id:
            raise HeartbeatError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {req.member_id} with instance id {req.instance_id} was fenced "
                                 f"by member {cg.static_members.get(req.instance_id)}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # Gone for now, back soon: keep its assignment and do not rebalance; the session timer
            # removes it if it does not come back in time.
            member.member_epoch = STATIC_LEAVE_EPOCH
            cg.dirty.add(member.member_id)
            cancel(member.rebalance_timer)
            member.rebalance_timer = None
        else:
            self.remove_member(group, member, "the member left the group")
        return HeartbeatResult(ErrorCode.NONE, None, member.member_id, req.member_epoch, 0, None)

    def remove_member(self, group: Group, member: ConsumerMember, reason: str) -> None:
        """Fence or remove a member: its partitions are free and the group epoch rises."""
        cg = group.consumer
        if cg is None or cg.members.get(member.member_id) is not member:
            return
        log.info("consumer group %s: removing member %s (%s)", cg.group_id, member.member_id, reason)
        self._drop(cg, member)
        cg.target.pop(member.member_id, None)
        cg.group_epoch += 1
        cg.dirty.add(member.member_id)
        self.on_member_removed(group, member)

    @staticmethod
    def _drop(cg: ConsumerGroup, member: ConsumerMember) -> None:
        for timer in (member.session_timer, member.rebalance_timer, member.sync_timer, member.join_timer):
            cancel(timer)
        member.session_timer = member.rebalance_timer = member.sync_timer = member.join_timer = None
        cg.release(member)
        del cg.members[member.member_id]
        if member.instance_id is not None and cg.static_members.get(member.instance_id) == member.member_id:
            del cg.static_members[member.instance_id]

    # ============================================================================== timers

    def _arm_timers(self, group: Group, cg: ConsumerGroup, member: ConsumerMember) -> None:
        arm_member_timers(self.ctx, member, self.session_timeout_ms(cg.group_id),
                          member.state is MemberState.UNREVOKED_PARTITIONS, functools.partial(self._expire, group, member),
                          "did not revoke partitions in time")

    def _expire(self, group: Group, member: ConsumerMember, reason: str) -> None:
        if self.ctx.live_group(group):
            self.remove_member(group, member, reason)
            self.ctx.spawn(self.persist(group.group_id))

    def arm_loaded(self, groups: list[Group]) -> None:
        """Groups just loaded from the log: their members' sessions start now (Kafka does the same),
        so members that did not survive the restart are removed in time."""
        for group in groups:
            for member in group.consumer.members.values() if group.consumer is not None else ():
                if member.session_timer is None:
                    timeout = (member.classic.session_timeout_ms if member.classic is not None
                               else self.session_timeout_ms(group.group_id))
                    member.session_timer = self.ctx.call_later(timeout, self._expire, group, member, "session timeout")

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

    # ============================================================================= offsets

    def validate_fetch(self, group_id: str, member_id: str | None, epoch: int) -> ErrorCode | None:
        """OffsetFetch v9+: a member fetching must be one, at its current epoch."""
        group = self.ctx.groups.get(group_id)
        if group is None or group.consumer is None or (member_id is None and epoch < 0):
            return None
        member = group.consumer.members.get(member_id or "")
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.STALE_MEMBER_EPOCH if epoch != member.member_epoch else None

    # ============================================================================ describe

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ConsumerGroup | None]:
        """ConsumerGroupDescribe for one group: a classic group is not found here, as in Kafka (the
        admin client then falls back to DescribeGroups)."""
        error = self.ctx.status_error(group_id)
        if error is not None:
            return error, None, None
        group = self.ctx.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.", None
        if group.consumer is None:
            return ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.", None
        return ErrorCode.NONE, None, group.consumer
