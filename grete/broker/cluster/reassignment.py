"""Partition reassignment (KIP-455, Kafka's onPartitionReassignment): the target replicas join, catch
up into the ISR, then become the replica set; the replicas left out are deleted. The lists under way
live in the topic znodes (adding/removing), so a new controller resumes them."""

from __future__ import annotations

import logging

from grete.broker.cluster.controller_core import NO_LEADER, ControllerCore
from grete.broker.cluster.state import ControllerContext, TopicPartition
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import Op
from grete.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class Reassignments:
    def __init__(self, core: ControllerCore) -> None:
        self.core = core
        self.targets: dict[TopicPartition, list[int]] = {}  # reassignments under way

    def resume(self) -> None:
        """Take up the reassignments a previous controller started (the topic znodes' adding/removing lists)."""
        self.targets = {(t, p): [r for r in a.partitions[p] if r not in a.removing.get(p, [])]
                        for t, a in self.ctx.assignments.items() for p in set(a.adding) | set(a.removing)
                        if p in a.partitions}

    @property
    def ctx(self) -> ControllerContext:
        return self.core.ctx

    def ongoing(self) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """Ongoing reassignments: (replicas, adding, removing) per partition."""
        found = {}
        for topic, assignment in self.ctx.assignments.items():
            for index in set(assignment.adding) | set(assignment.removing):
                found[(topic, index)] = (list(assignment.partitions.get(index, [])),
                                         list(assignment.adding.get(index, [])), list(assignment.removing.get(index, [])))
        return found

    async def reassign(self, targets: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        if not self.core.active:
            return {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in targets}
        outcome: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        started: list[TopicPartition] = []
        for tp, target in targets.items():
            assignment = self.ctx.assignments.get(tp[0])
            if assignment is None or tp[1] not in assignment.partitions or tp[0] in self.ctx.deleting:
                outcome[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.")
                continue
            adding = assignment.adding.get(tp[1], [])
            origin = [r for r in assignment.partitions[tp[1]] if r not in adding]
            if target is None:
                if tp[1] not in assignment.adding and tp[1] not in assignment.removing:
                    outcome[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No ongoing reassignment for this partition.")
                    continue
                target = origin  # cancelling: back to where it was
            unknown = [r for r in target if r not in self.ctx.live]
            if unknown:
                outcome[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                               f"The manual partition assignment includes broker(s) {unknown} that are not registered.")
                continue
            replicas = list(dict.fromkeys(target + origin))
            assignment.partitions[tp[1]] = replicas
            assignment.adding[tp[1]] = [r for r in target if r not in origin]
            assignment.removing[tp[1]] = [r for r in origin if r not in target]
            for side in (assignment.adding, assignment.removing):
                if not side[tp[1]]:
                    del side[tp[1]]
            self.targets[tp] = list(target)
            outcome[tp] = (ErrorCode.NONE, None)
            started.append(tp)
        for topic in {tp[0] for tp in started}:
            await self._write_assignment(topic)
        if started:
            # Every replica, old and new, learns the new replica set (leader epoch +1); the new ones
            # start following and catching up.
            changes = {tp: self._bumped(tp) for tp in started if tp in self.ctx.states}
            self.core.publish(await self.core.write_states(changes))
            for tp in started:
                await self.maybe_complete(tp)
        return outcome

    def _bumped(self, tp: TopicPartition) -> zk.PartitionState:
        state = self.ctx.states[tp]
        return zk.PartitionState(state.leader, state.leader_epoch + 1, list(state.isr), self.ctx.epoch,
                                 state.recovering, state.zk_version)

    async def _write_assignment(self, topic: str) -> None:
        found = await self.core.zk.get(zk.topic_path(topic))
        if found is not None:
            await self.core.fenced([Op("set", zk.topic_path(topic), zk.encode_topic(self.ctx.assignments[topic]),
                                       found[1].version)])

    async def maybe_complete(self, tp: TopicPartition) -> None:
        """Once every target replica is in the ISR: the target becomes the replica set, leadership
        moves into it if needed (leader epoch +1 either way), the replicas left out are deleted."""
        target = self.targets.get(tp)
        state = self.ctx.states.get(tp)
        assignment = self.ctx.assignments.get(tp[0])
        if target is None or state is None or assignment is None:
            return
        if not all(r in state.isr for r in target):
            return
        removed = [r for r in assignment.partitions.get(tp[1], []) if r not in target]
        isr = [r for r in state.isr if r in target]
        leader = state.leader
        if leader not in target or leader not in self.ctx.live:
            leader = next((r for r in target if r in isr and r in self.ctx.live), NO_LEADER)
        assignment.partitions[tp[1]] = list(target)
        assignment.adding.pop(tp[1], None)
        assignment.removing.pop(tp[1], None)
        del self.targets[tp]
        await self._write_assignment(tp[0])
        new = zk.PartitionState(leader, state.leader_epoch + 1, isr, self.ctx.epoch, state.recovering, state.zk_version)
        self.core.publish(await self.core.write_states({tp: new}))
        for broker_id in removed:
            self.core.send_stop_replica(broker_id, [tp], delete=True)
        log.info("controller: reassignment of %s-%d done: replicas %s", tp[0], tp[1], target)
