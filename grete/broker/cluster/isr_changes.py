"""ISR changes proposed by partition leaders (AlterPartition, Kafka's tryProcessAlterPartition): each
checked against the state the controller knows, written conditionally, told to every broker."""

from __future__ import annotations

from dataclasses import dataclass

from grete.broker.cluster.controller_core import ControllerCore
from grete.broker.cluster.reassignment import Reassignments
from grete.broker.cluster.state import ControllerContext, TopicPartition
from grete.coordinator.zookeeper import zk_layout as zk
from grete.protocol.errors import ErrorCode


@dataclass(frozen=True)
class IsrChange:
    """One partition of an AlterPartition: the ISR its leader proposes, from the state it knows."""

    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class IsrResult:
    change: IsrChange
    error: ErrorCode
    state: zk.PartitionState | None = None


class IsrChanges:
    def __init__(self, core: ControllerCore, reassignment: Reassignments) -> None:
        self.core = core
        self.reassignment = reassignment

    @property
    def ctx(self) -> ControllerContext:
        return self.core.ctx

    async def alter_partition(self, broker_id: int, broker_epoch: int,
                              changes: list[IsrChange]) -> tuple[ErrorCode, list[IsrResult]]:
        if not self.core.active:
            return ErrorCode.NOT_CONTROLLER, []
        info = self.ctx.live.get(broker_id)
        if info is None or (broker_epoch != -1 and broker_epoch != info.epoch):
            return ErrorCode.STALE_BROKER_EPOCH, []
        results: list[IsrResult] = []
        accepted: dict[TopicPartition, zk.PartitionState] = {}
        for change in changes:
            tp = (change.topic, change.partition)
            state = self.ctx.states.get(tp)
            if change.topic not in self.ctx.assignments or state is None:
                results.append(IsrResult(change, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            elif change.leader_epoch > state.leader_epoch or change.partition_epoch > state.zk_version:
                results.append(IsrResult(change, ErrorCode.NOT_CONTROLLER))
            elif change.leader_epoch < state.leader_epoch:
                results.append(IsrResult(change, ErrorCode.FENCED_LEADER_EPOCH))
            elif state.leader != broker_id:
                results.append(IsrResult(change, ErrorCode.INVALID_REQUEST))
            elif sorted(change.isr) == sorted(state.isr):
                results.append(IsrResult(change, ErrorCode.NONE, state))  # already so
            elif change.partition_epoch < state.zk_version:
                results.append(IsrResult(change, ErrorCode.INVALID_UPDATE_VERSION))
            elif any(r not in self.ctx.live or r in self.ctx.shutting_down or r not in self.ctx.replicas(tp)
                     for r in change.isr):
                results.append(IsrResult(change, ErrorCode.INELIGIBLE_REPLICA))
            else:
                accepted[tp] = zk.PartitionState(state.leader, state.leader_epoch, list(change.isr),
                                                 self.ctx.epoch, state.recovering, state.zk_version)
                results.append(IsrResult(change, ErrorCode.NONE))
        written = set(await self.core.write_states(accepted)) if accepted else set()
        for n, res in enumerate(results):
            tp = (res.change.topic, res.change.partition)
            if tp in accepted:
                results[n] = (IsrResult(res.change, ErrorCode.NONE, self.ctx.states[tp]) if tp in written
                              else IsrResult(res.change, ErrorCode.INVALID_UPDATE_VERSION))
        if written:
            # No LeaderAndIsr for a leader's own ISR change: UpdateMetadata tells everyone.
            self.core.send_update_metadata(self.ctx.live, sorted(written))
            for tp in sorted(written):
                if tp in self.reassignment.targets:
                    await self.reassignment.maybe_complete(tp)
        return ErrorCode.NONE, results
