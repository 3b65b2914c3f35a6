"""Streams groups (KIP-1071): StreamsGroupHeartbeat, StreamsGroupDescribe, and the member-epoch checks
of OffsetCommit, TxnOffsetCommit and OffsetFetch for their members.

A heartbeat, in Kafka 4.3.1's order: validate the request (``streams_requests``); get or create the
group (created only by a join); find or create the member and check its epoch; take the topology a
joining member brings (the group's first, or a newer epoch); apply what changed; re-check the topology
against the topics when they changed (``streams_topology.configure``: statuses, tasks, internal topics
to create); bump the group epoch if membership, topology or topics changed; compute a new target
assignment when the group epoch is ahead of it (active tasks, ``streams_state.assign_active``);
reconcile the member (revoke before assign); re-arm its timers. All of it in one call on the event
loop, so the group has one owner; the answer then waits for the records of what changed
(``streams_records``). Internal topics to create go back to the handler, which creates them as
Kafka's broker does for a streams group, without holding the answer.
"""

from __future__ import annotations

from typing import Any

from grete.coordinator.groups import streams_records
from grete.coordinator.groups.coordinator_records import Record
from grete.coordinator.groups.group_state import Group, GroupState
from grete.coordinator.groups.group_types import STREAMS_GROUP_TYPE
from grete.coordinator.groups.modern_groups import ModernGroups
from grete.coordinator.groups.modern_state import JOIN_EPOCH, GroupRequestError
from grete.coordinator.groups.streams_requests import (
    EndpointPartitions,
    StreamsHeartbeat,
    StreamsResult,
    validate,
)
from grete.coordinator.groups.streams_state import (
    MemberState,
    StreamsGroup,
    StreamsMember,
    assign_active,
    assign_standby,
    reconcile,
)
from grete.coordinator.groups.streams_topology import (
    ASSIGNMENT_DELAYED,
    SHUTDOWN_APPLICATION,
    TopicView,
    Topology,
    configure,
)
from grete.protocol.errors import ErrorCode


class StreamsGroups(ModernGroups[StreamsGroup, StreamsMember, StreamsHeartbeat, StreamsResult]):
    """The streams-protocol part of the group coordinator, over the shared ``GroupContext``."""

    kind = "streams"
    held = "tasks"
    session_key = "streams.session.timeout.ms"
    stable = MemberState.STABLE
    heartbeat_key = "streams.heartbeat.interval.ms"

    # ===================================================================== the kind's hooks

    def _state(self, group: Group) -> StreamsGroup | None:
        return group.streams

    def _enabled(self) -> bool:
        return self.ctx.config.streams_protocol_enabled

    def _answer(self, error: ErrorCode, message: str | None = None) -> StreamsResult:
        return StreamsResult(error, message)

    def _validate(self, req: StreamsHeartbeat) -> None:
        validate(req)

    def _changes(self, state: StreamsGroup) -> list[Record]:
        records = streams_records.changes(state, state.dirty)
        state.dirty.clear()
        return records

    def _new_member(self, member_id: str, req: StreamsHeartbeat) -> StreamsMember:
        return StreamsMember(member_id, instance_id=req.instance_id)

    def _max_size(self) -> int:
        return self.ctx.config.streams_max_size

    def _reported(self, req: StreamsHeartbeat) -> frozenset[Any] | None:
        return req.active_tasks

    def _defaults(self) -> tuple[int, int]:
        return self.ctx.config.streams_session_timeout_ms, self.ctx.config.streams_heartbeat_interval_ms

    def _left(self, member: StreamsMember, req: StreamsHeartbeat) -> StreamsResult:
        return StreamsResult(ErrorCode.NONE, None, member.member_id, req.member_epoch, 0, statuses=[])

    def _removed(self, group: Group, state: StreamsGroup, member: StreamsMember) -> None:
        state.target_standby.pop(member.member_id, None)
        state.endpoint_epoch += 1
        if not state.members:
            state.shutdown_requested = False  # the application is gone; a new run starts afresh

    # ====================================================================== configuration

    def initial_delay_ms(self, group_id: str) -> int:
        return self._setting(group_id, "streams.initial.rebalance.delay.ms",
                             self.ctx.config.streams_initial_rebalance_delay_ms)

    def standby_replicas(self, group_id: str) -> int:
        return self._setting(group_id, "streams.num.standby.replicas",
                             self.ctx.config.streams_num_standby_replicas)

    # ========================================================================== heartbeat

    def _beat(self, req: StreamsHeartbeat) -> StreamsResult:
        group = self._group(req)
        sg = group.streams
        assert sg is not None
        if req.member_epoch < 0:
            return self._leave(group, sg, req)
        if req.topology is not None and sg.topology is not None and req.topology != sg.topology:
            # Kafka 4.3.1 refuses any other topology than the group's, whatever its epoch and even in
            # an empty group (measured), before anything changes.
            raise GroupRequestError(ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")
        if req.member_epoch == JOIN_EPOCH:
            member, bump = self._join(sg, req.member_id, req)
        else:
            member = self._known_member(sg, req)
            bump = False
        if req.topology is not None:
            bump |= self._take_topology(sg, member, req.topology)
        endpoint_before = member.user_endpoint
        bump |= self._apply(member, req)
        if req.shutdown_application:
            sg.shutdown_requested = True
        self.refresh(sg, self.ctx.topic_view(), bump)
        before = (member.assigned, member.standby)
        reconcile(sg, member, req.active_tasks, req.standby_tasks)
        changed = (member.assigned, member.standby) != before
        if changed or member.user_endpoint != endpoint_before:
            sg.endpoint_epoch += 1
        sg.dirty.add(member.member_id)
        self._arm_timers(group, member)
        full = req.member_epoch == JOIN_EPOCH or changed
        return StreamsResult(
            ErrorCode.NONE, None, member.member_id, member.member_epoch, self.heartbeat_interval_ms(sg.group_id),
            statuses=self._statuses(sg), active_tasks=member.assigned if full else None,
            standby_tasks=member.standby if full else None,
            endpoint_epoch=sg.endpoint_epoch,
            endpoints=(self._endpoints(sg) if req.endpoint_information_epoch < sg.endpoint_epoch else None),
            to_create=sg.configured.to_create)

    def refresh(self, sg: StreamsGroup, view: TopicView, bump: bool) -> None:
        """Re-check the topology when the topics it uses changed; a new group epoch if anything did;
        then a new target assignment if the group epoch is ahead of it."""
        if self.standby_replicas(sg.group_id) != sg.standby_replicas:
            bump = True  # a group config changed how many standby copies to place
        if sg.topology is not None:
            seen = sg.used_topics(view)
            if seen != sg.topics_seen:
                sg.topics_seen = seen
                sg.configured = configure(sg.topology, view)
                bump = True
        if bump:
            sg.group_epoch += 1
        if sg.group_epoch > sg.assignment_epoch:
            self._compute_target(sg)

    def _group(self, req: StreamsHeartbeat) -> Group:
        group = self.ctx.groups.get(req.group_id)
        if group is not None and group.streams is not None:
            return group
        if req.member_epoch != JOIN_EPOCH:
            if group is None or group.is_(GroupState.DEAD):
                raise GroupRequestError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {req.group_id} not found.")
            raise GroupRequestError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a streams group.")
        if group is None or group.is_(GroupState.DEAD):
            group = self.ctx.new_group(req.group_id)
        elif group.consumer is not None or not group.is_(GroupState.EMPTY):
            raise GroupRequestError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a streams group.")
        else:
            self._take_empty_classic(req.group_id)
        group.streams = StreamsGroup(req.group_id)
        group.protocol_type = STREAMS_GROUP_TYPE
        delay = self.initial_delay_ms(req.group_id)
        if delay > 0:
            group.streams.delayed_until_ms = self.ctx.now_ms() + delay
            self.ctx.call_later(delay, self._end_delay, group)
        return group

    def _end_delay(self, group: Group) -> None:
        """The initial delay is over: a new group epoch, so the next heartbeat computes the first real
        target assignment."""
        sg = group.streams
        if self.ctx.live_group(group) and sg is not None and sg.delayed_until_ms is not None:
            sg.delayed_until_ms = None
            sg.group_epoch += 1
            self.ctx.spawn(self.persist(group.group_id))

    def replace_static(self, sg: StreamsGroup, old: StreamsMember, member_id: str) -> StreamsMember:
        """A static member back within its session: the new member id takes over the old one's tasks
        and target without a rebalance."""
        assigned, pending = old.assigned, old.pending_revocation
        standby, pending_standby = old.standby, old.pending_standby_revocation
        self._drop(sg, old)
        sg.dirty.add(old.member_id)
        member = StreamsMember(member_id, instance_id=old.instance_id, rack_id=old.rack_id,
                               rebalance_timeout_ms=old.rebalance_timeout_ms, topology_epoch=old.topology_epoch,
                               process_id=old.process_id, user_endpoint=old.user_endpoint,
                               client_tags=old.client_tags, previous_member_epoch=old.previous_member_epoch)
        sg.members[member_id] = member
        sg.target[member_id] = sg.target.pop(old.member_id, frozenset())
        sg.target_standby[member_id] = sg.target_standby.pop(old.member_id, frozenset())
        if old.instance_id is not None:
            sg.static_members[old.instance_id] = member_id
        sg.set_owned(member, assigned, pending)
        member.standby, member.pending_standby_revocation = standby, pending_standby
        return member

    @staticmethod
    def _take_topology(sg: StreamsGroup, member: StreamsMember, topology: Topology) -> bool:
        """A joining member's topology becomes the group's if it has none (a new group epoch); any
        other was refused before (``_heartbeat``)."""
        member.topology_epoch = topology.epoch
        if sg.topology is None:
            sg.topology = topology
            sg.topics_seen = None  # re-configure against the topics
            return True
        return False

    @staticmethod
    def _apply(member: StreamsMember, req: StreamsHeartbeat) -> bool:
        """Take the request's changed fields; True if something the assignment depends on changed."""
        before = (member.rack_id, member.process_id, member.client_tags)
        member.client_id, member.client_host = req.client_id, req.client_host
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.process_id is not None:
            member.process_id = req.process_id
        if req.user_endpoint is not None:
            member.user_endpoint = req.user_endpoint
        if req.client_tags is not None:
            member.client_tags = req.client_tags
        if req.task_offsets is not None:
            member.task_offsets = req.task_offsets
        if req.task_end_offsets is not None:
            member.task_end_offsets = req.task_end_offsets
        return before != (member.rack_id, member.process_id, member.client_tags)

    def _statuses(self, sg: StreamsGroup) -> list[tuple[int, str]]:
        statuses = []
        if sg.delayed_until_ms is not None:
            statuses.append((ASSIGNMENT_DELAYED, "Assignment delayed due to the configured initial rebalance delay."))
        statuses.extend(sg.configured.statuses)
        if sg.shutdown_requested:
            statuses.append((SHUTDOWN_APPLICATION, "A KafkaStreams instance encountered a fatal error and requested "
                                                   "a shutdown for the entire application."))
        return statuses

    def _endpoints(self, sg: StreamsGroup) -> list[EndpointPartitions]:
        """For interactive queries: each member's endpoint and the partitions its active and its
        standby tasks read (a task's partition of each of its subtopology's input topics that has it)."""
        if sg.topology is None:
            return []
        view = self.ctx.topic_view()
        inputs = {sub.subtopology_id: sub.inputs() for sub in sg.topology.subtopologies}

        def partitions(tasks: frozenset[tuple[str, int]]) -> dict[str, list[int]]:
            found: dict[str, list[int]] = {}
            for sub_id, p in sorted(tasks):
                for topic in inputs.get(sub_id, ()):
                    if topic in view and p < view[topic][1]:
                        found.setdefault(topic, []).append(p)
            return {t: sorted(ps) for t, ps in sorted(found.items())}

        return [(m.user_endpoint, partitions(m.assigned), partitions(m.standby))
                for m in sorted(sg.members.values(), key=lambda m: m.member_id) if m.user_endpoint is not None]

    # ================================================================== target assignment

    def _compute_target(self, sg: StreamsGroup) -> None:
        """Active tasks for the current group epoch: none while the topology is not ready or during
        the initial delay (the members still move to the epoch, with nothing to do)."""
        topology = sg.topology
        ready = topology is not None and sg.configured.ready and sg.delayed_until_ms is None
        tasks = sg.configured.tasks if ready else {}
        sg.target = assign_active(list(sg.members), tasks, sg.target)
        sg.standby_replicas = self.standby_replicas(sg.group_id)
        stateful = ({s.subtopology_id for s in topology.subtopologies if s.state_changelog_topics}
                    if ready and topology is not None else set())
        sg.target_standby = assign_standby({m.member_id: m.process for m in sg.members.values()}, sg.target,
                                           sg.standby_replicas, sg.target_standby, stateful)
        sg.assignment_epoch = sg.group_epoch
        sg.dirty.update(sg.members)
