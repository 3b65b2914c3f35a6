"""Classic-protocol members inside a KIP-848 consumer group, and online migration between the two
protocols (``group.consumer.migration.policy``), after Kafka's GroupMetadataManager.

* **Upgrade**: a ConsumerGroupHeartbeat for a classic group with members (embedded protocol
  ``consumer``, at most ``group.consumer.max.size`` members, policy ``upgrade``/``bidirectional``)
  turns it into a consumer group: each classic member keeps its generation as member epoch and its
  assignment; parked JoinGroup/SyncGroup answers get REBALANCE_IN_PROGRESS.
* **Classic members of a consumer group** keep sending JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup. JoinGroup is answered at once (no leader: the server-side assignor decides) with the
  member epoch as generation, SyncGroup with the member's reconciled partitions as a
  ConsumerProtocolAssignment, and Heartbeat says REBALANCE_IN_PROGRESS when the member must rejoin
  (the group epoch moved on, it has partitions to revoke, or partitions it waits for were released).
* **Downgrade**: when the last consumer-protocol member leaves (or is fenced) and only classic
  members remain (policy ``downgrade``/``bidirectional``, at most ``group.max.size``), the group
  becomes a classic group that rebalances at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from grete.coordinator.groups.consumer_assignors import Assignment, TopicView
from grete.coordinator.groups.consumer_groups import ConsumerGroups
from grete.coordinator.groups.consumer_records import tombstones
from grete.coordinator.groups.consumer_requests import CONSUMER_PROTOCOL_TYPE
from grete.coordinator.groups.consumer_state import (
    ClassicMeta,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    reconcile,
)
from grete.coordinator.groups.group_context import GROUP_WRITE_ERRORS, GroupContext, cancel, log
from grete.coordinator.groups.group_membership import Membership, Protocols
from grete.coordinator.groups.group_state import Group, GroupState, Member
from grete.coordinator.groups.group_types import UNKNOWN_MEMBER_ID, JoinResult, LeaveMember, SyncResult
from grete.coordinator.groups.modern_state import GroupRequestError
from grete.coordinator.groups.offsets_format import encode_group_key
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ErrorCode, ProtocolError
from grete.protocol.messages.consumer_protocol import ConsumerProtocolAssignment, ConsumerProtocolSubscription

UPGRADE_POLICIES = ("upgrade", "bidirectional")
DOWNGRADE_POLICIES = ("downgrade", "bidirectional")


def decode_subscription(metadata: bytes) -> tuple[int, ConsumerProtocolSubscription]:
    r = Reader(metadata)
    version = r.int16()
    return version, ConsumerProtocolSubscription.decode(r, min(max(version, 0), 3))


def encode_assignment(assigned: Assignment, view: TopicView, version: int) -> bytes:
    names = {topic_id: name for name, (topic_id, _) in view.items()}
    by_topic: dict[str, list[int]] = {}
    for topic_id, partition in sorted(assigned):
        if topic_id in names:
            by_topic.setdefault(names[topic_id], []).append(partition)
    w = Writer()
    version = min(max(version, 0), 3)
    w.int16(version)
    ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=name, partitions=parts) for name, parts in by_topic.items()],
        user_data=None).encode(w, version)
    return w.getvalue()


def decode_assignment(data: bytes, view: TopicView) -> Assignment:
    if not data:
        return frozenset()
    r = Reader(data)
    version = r.int16()
    assignment = ConsumerProtocolAssignment.decode(r, min(max(version, 0), 3))
    return frozenset((view[t.topic][0], p) for t in assignment.assigned_partitions if t.topic in view
                     for p in t.partitions)


class ClassicMembers:
    """The classic APIs for groups that are consumer groups, and the conversions."""

    def __init__(self, ctx: GroupContext, consumer: ConsumerGroups, membership: Membership) -> None:
        self.ctx = ctx
        self.consumer = consumer
        self.membership = membership
        consumer.on_member_removed = self._maybe_downgrade
        consumer.upgrade = self.upgrade

    # ============================================================================ upgrade

    def upgrade(self, group: Group) -> bool:
        """Kafka's validateOnlineUpgrade + convertToConsumerGroup; False if the group must stay classic."""
        config = self.ctx.config
        if config.consumer_migration_policy not in UPGRADE_POLICIES:
            log.info("cannot upgrade classic group %s: the online upgrade is disabled", group.group_id)
            return False
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE or len(group.members) > config.consumer_max_size:
            return False
        view = self.ctx.topic_view()
        cg = ConsumerGroup(group.group_id, group_epoch=group.generation_id, assignment_epoch=group.generation_id)
        try:
            for m in group.members.values():
                _, sub = decode_subscription(m.metadata_or_empty(group.protocol_name) or m.protocols[0][1])
                member = ConsumerMember(
                    m.member_id, instance_id=m.group_instance_id, rack_id=sub.rack_id, client_id=m.client_id,
                    client_host=m.client_host, subscribed_topic_names=tuple(sorted(set(sub.topics))),
                    rebalance_timeout_ms=m.rebalance_timeout_ms, member_epoch=group.generation_id,
                    previous_member_epoch=group.generation_id,
                    classic=ClassicMeta(m.session_timeout_ms, tuple(m.protocols)))
                cg.members[m.member_id] = member
                cg.target[m.member_id] = decode_assignment(m.assignment, view)
                cg.set_owned(member, cg.target[m.member_id], frozenset())
                if m.group_instance_id is not None:
                    cg.static_members[m.group_instance_id] = m.member_id
        except (ProtocolError, ValueError, IndexError):
            log.warning("cannot upgrade classic group %s: malformed embedded consumer protocol", group.group_id)
            return False
        self._retire_classic(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.consumer = cg
        cg.dirty.update(cg.members)
        self.ctx.spawn(self.ctx.append(self.ctx.partition_for(group.group_id),
                                       [(encode_group_key(group.group_id), None)], GROUP_WRITE_ERRORS))
        for member in cg.members.values():
            self._arm_session(group, member)
        log.info("upgraded classic group %s to a consumer group (%d members)", group.group_id, len(cg.members))
        return True

    def _retire_classic(self, group: Group, error: ErrorCode) -> None:
        """The classic state ends: parked answers get ``error``, timers stop, members go."""
        for m in group.members.values():
            if m.join_future is not None and not m.join_future.done():
                m.join_future.set_result(JoinResult.failed(m.member_id, error))
            if m.sync_future is not None and not m.sync_future.done():
                m.sync_future.set_result(SyncResult(error))
            m.join_future = m.sync_future = None
            cancel(m.session_timer)
        self.membership.unload_group(group)
        group.members.clear()
        group.static_members.clear()
        group.pending_members.clear()
        group.pending_sync.clear()
        group.num_awaiting_join = 0
        group.supported_protocols.clear()
        group.leader_id = None
        group.state = GroupState.EMPTY
        group.state_timestamp_ms = self.ctx.now_ms()

    # =========================================================================== JoinGroup

    async def join(self, group: Group, *, member_id: str, instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int, protocol_type: str,
                   protocols: Protocols, require_known_member_id: bool) -> JoinResult:
        cg = group.consumer
        assert cg is not None
        joining_id = member_id or f"{client_id}-{uuid.uuid4()}"
        if joining_id not in cg.members and (instance_id is None or instance_id not in cg.static_members) \
                and len(cg.members) >= self.ctx.config.consumer_max_size:
            return JoinResult.failed(member_id, ErrorCode.GROUP_MAX_SIZE_REACHED)
        if not self._supports(cg, protocol_type, protocols):
            return JoinResult.failed(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if require_known_member_id and member_id == UNKNOWN_MEMBER_ID and instance_id is None:
            return JoinResult.failed(joining_id, ErrorCode.MEMBER_ID_REQUIRED)
        try:
            version, sub = decode_subscription(protocols[0][1])
        except (ProtocolError, ValueError):
            return JoinResult.failed(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        try:
            member, bump = self._member(cg, joining_id, member_id, instance_id)
        except GroupRequestError as exc:
            return JoinResult.failed(member_id, exc.error)
        before = (member.rack_id, member.subscribed_topic_names)
        member.client_id, member.client_host = client_id, client_host
        member.rack_id = sub.rack_id if version >= 3 and sub.rack_id else member.rack_id
        member.subscribed_topic_names = tuple(sorted(set(sub.topics)))
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.server_assignor = None
        member.classic = ClassicMeta(session_timeout_ms, tuple(protocols))
        bump |= before != (member.rack_id, member.subscribed_topic_names)
        view = self.ctx.topic_view()
        self.consumer.refresh(cg, view, bump)
        owned = frozenset((view[t.topic][0], p) for t in (sub.owned_partitions or []) if t.topic in view
                          for p in t.partitions) if version >= 1 else frozenset()
        reconcile(cg, member, owned)
        cg.dirty.add(member.member_id)
        cancel(member.join_timer)
        member.join_timer = None
        self._arm_session(group, member)
        cancel(member.sync_timer)
        member.sync_timer = self.ctx.call_later(rebalance_timeout_ms, self._expire, group, member,
                                                "no SyncGroup within the rebalance timeout")
        error = await self.ctx.detached(self.consumer.persist(group.group_id))
        if error is not ErrorCode.NONE:
            return JoinResult.failed(member.member_id, error)
        return JoinResult(ErrorCode.NONE, generation_id=member.member_epoch, protocol_type=CONSUMER_PROTOCOL_TYPE,
                          protocol_name=protocols[0][0], leader="", member_id=member.member_id)

    @staticmethod
    def _supports(cg: ConsumerGroup, protocol_type: str, protocols: Protocols) -> bool:
        """The embedded protocol is ``consumer`` and shares a name with every classic member's."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols:
            return False
        names = {name for name, _ in protocols}
        return all(names & {name for name, _ in m.classic.protocols}
                   for m in cg.members.values() if m.classic is not None)

    def _member(self, cg: ConsumerGroup, joining_id: str, member_id: str,
                instance_id: str | None) -> tuple[ConsumerMember, bool]:
        if instance_id is not None:
            owner = cg.static_members.get(instance_id)
            if owner is not None and owner != joining_id:
                if member_id != UNKNOWN_MEMBER_ID:
                    raise GroupRequestError(ErrorCode.FENCED_INSTANCE_ID)
                return self.consumer.replace_static(cg, cg.members[owner], joining_id), False
        member = cg.members.get(joining_id)
        if member is not None:
            return member, False
        # As Kafka does, a member id handed out with MEMBER_ID_REQUIRED (or any other) joins as new.
        member = ConsumerMember(joining_id, instance_id=instance_id)
        cg.members[joining_id] = member
        if instance_id is not None:
            cg.static_members[instance_id] = joining_id
        return member, True

    # ===================================================================== Sync, Heartbeat

    def _validate(self, cg: ConsumerGroup, member_id: str, instance_id: str | None,
                  generation_id: int) -> ConsumerMember | ErrorCode:
        if instance_id is not None:
            owner = cg.static_members.get(instance_id)
            if owner is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if owner != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        member = cg.members.get(member_id)
        if member is None or member.classic is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        return member

    def sync(self, group: Group, *, generation_id: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        cg = group.consumer
        assert cg is not None
        member = self._validate(cg, member_id, instance_id, generation_id)
        if isinstance(member, ErrorCode):
            return SyncResult(member)
        assert member.classic is not None
        first = member.classic.protocols[0]
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE) or \
                (protocol_name is not None and protocol_name != first[0]):
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if cg.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._arm_join(group, member)
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        cancel(member.sync_timer)
        member.sync_timer = None
        self._arm_session(group, member)
        version = Reader(first[1]).int16() if len(first[1]) >= 2 else 0
        return SyncResult(ErrorCode.NONE, CONSUMER_PROTOCOL_TYPE, first[0],
                          encode_assignment(member.assigned, self.ctx.topic_view(), version))

    def heartbeat(self, group: Group, *, generation_id: int, member_id: str, instance_id: str | None) -> ErrorCode:
        cg = group.consumer
        assert cg is not None
        member = self._validate(cg, member_id, instance_id, generation_id)
        if isinstance(member, ErrorCode):
            return member
        self._arm_session(group, member)
        if (member.member_epoch < cg.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not _waiting(cg, member))):
            self._arm_join(group, member)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    async def leave(self, group: Group, members: Iterable[LeaveMember]) -> list[tuple[LeaveMember, ErrorCode]]:
        cg = group.consumer
        assert cg is not None
        results = []
        for leaving in members:
            member_id = leaving.member_id
            if leaving.group_instance_id is not None:
                owner = cg.static_members.get(leaving.group_instance_id)
                if owner is None or (member_id and owner != member_id):
                    results.append((leaving, ErrorCode.UNKNOWN_MEMBER_ID if owner is None
                                    else ErrorCode.FENCED_INSTANCE_ID))
                    continue
                member_id = owner
            member = cg.members.get(member_id)
            if member is None:
                results.append((leaving, ErrorCode.UNKNOWN_MEMBER_ID))
                continue
            self.consumer.remove_member(group, member, leaving.reason or "the member left the group")
            results.append((leaving, ErrorCode.NONE))
        await self.ctx.detached(self.consumer.persist(group.group_id))
        return results

    # ============================================================================== timers

    def _arm_session(self, group: Group, member: ConsumerMember) -> None:
        assert member.classic is not None
        cancel(member.session_timer)
        member.session_timer = self.ctx.call_later(member.classic.session_timeout_ms, self._expire, group, member,
                                                   "session timeout")

    def _arm_join(self, group: Group, member: ConsumerMember) -> None:
        if member.join_timer is None:
            member.join_timer = self.ctx.call_later(member.rebalance_timeout_ms, self._expire, group, member,
                                                    "did not rejoin within the rebalance timeout")

    def _expire(self, group: Group, member: ConsumerMember, reason: str) -> None:
        if self.ctx.live_group(group) and group.consumer is not None:
            self.consumer.remove_member(group, member, reason)
            self.ctx.spawn(self.consumer.persist(group.group_id))

    # ========================================================================== downgrade

    def _maybe_downgrade(self, group: Group, removed: ConsumerMember) -> None:
        """Kafka's validateOnlineDowngradeWithFencedMember + convertToClassicGroup: called after a
        member was removed; the remaining members all use the classic protocol."""
        cg = group.consumer
        if cg is None or not cg.members or removed.classic is not None:
            return
        if any(m.classic is None for m in cg.members.values()):
            return
        config = self.ctx.config
        if config.consumer_migration_policy not in DOWNGRADE_POLICIES or len(cg.members) > config.group_max_size:
            return
        view = self.ctx.topic_view()
        records = tombstones(cg)
        survivors = list(cg.members.values())
        for survivor in survivors:
            for timer in (survivor.session_timer, survivor.rebalance_timer, survivor.sync_timer, survivor.join_timer):
                cancel(timer)
        group.consumer = None
        group.protocol_type = CONSUMER_PROTOCOL_TYPE
        # Kafka converts instead of bumping the epoch for the leaver: the generation is the group epoch
        # the survivors know, so their next heartbeat hears of the rebalance.
        group.generation_id = cg.group_epoch - 1
        group.state = GroupState.STABLE
        for cm in survivors:
            assert cm.classic is not None
            first = cm.classic.protocols[0]
            version = Reader(first[1]).int16() if len(first[1]) >= 2 else 0
            member = Member(cm.member_id, cm.instance_id, cm.client_id, cm.client_host, cm.rebalance_timeout_ms,
                            cm.classic.session_timeout_ms, CONSUMER_PROTOCOL_TYPE, list(cm.classic.protocols),
                            assignment=encode_assignment(cm.assigned, view, version))
            group.members[cm.member_id] = member
            group.supported_protocols.update(set(member.protocol_names))
            if cm.instance_id is not None:
                group.static_members[cm.instance_id] = cm.member_id
        group.protocol_name = survivors[0].classic.protocols[0][0] if survivors[0].classic else None
        group.leader_id = survivors[0].member_id
        group.subscribed_topics = group.compute_subscribed_topics()
        if records:
            self.ctx.spawn(self.ctx.append(self.ctx.partition_for(group.group_id), records, GROUP_WRITE_ERRORS))
        self.membership.downgraded(group)
        log.info("downgraded consumer group %s to a classic group (%d members)", group.group_id, len(survivors))


def _waiting(cg: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: some target partition is still held by another member."""
    return any(tp not in member.assigned and tp in cg.owners for tp in cg.target.get(member.member_id, ()))

