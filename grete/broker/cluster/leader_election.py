"""The controller's choice of leaders: for partitions whose leader is gone (clean, or unclean where
``unclean.leader.election.enable`` allows it), for new partitions, for ElectLeaders and the
auto-rebalance back to preferred leaders, and when a broker shuts down under control."""

from __future__ import annotations

import asyncio
import logging

from grete.broker.cluster.controller_core import NO_LEADER, ControllerCore
from grete.broker.cluster.state import ControllerContext, TopicPartition
from grete.coordinator.zookeeper import zk_layout as zk
from grete.protocol.errors import ErrorCode

log = logging.getLogger(__name__)


class LeaderElection:
    def __init__(self, core: ControllerCore) -> None:
        self.core = core
        self._rebalance_timer: asyncio.TimerHandle | None = None

    def cancel_rebalance(self) -> None:
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None

    @property
    def ctx(self) -> ControllerContext:
        return self.core.ctx

    # --- offline partitions (Kafka's PartitionLeaderElectionAlgorithms) ---------------------------
    def offline_leader(self, tp: TopicPartition, unclean: bool) -> zk.PartitionState | None:
        """A new state for a partition whose leader is gone, or None if no replica can lead it."""
        state = self.ctx.states[tp]
        live = [r for r in self.ctx.replicas(tp) if self.ctx.replica_online(r, tp) and r not in self.ctx.shutting_down]
        in_isr = [r for r in live if r in state.isr]
        if in_isr:
            leader = in_isr[0]
            return zk.PartitionState(leader, state.leader_epoch + 1, [r for r in state.isr if r in live],
                                     self.ctx.epoch, False, state.zk_version)
        if unclean and live:
            log.warning("unclean leader election for %s-%d: broker %d leads without the data of %s",
                        tp[0], tp[1], live[0], state.isr)
            return zk.PartitionState(live[0], state.leader_epoch + 1, [live[0]], self.ctx.epoch, True,
                                     state.zk_version)
        return None

    async def _unclean_allowed(self, topic: str) -> bool:
        found = await self.core.zk.get(zk.config_path("topics", topic))
        configs = zk.decode_config(found[0]) if found and found[0] else {}
        value = configs.get("unclean.leader.election.enable")
        return value.lower() == "true" if value is not None else self.core.settings.unclean_leader_election

    async def elect_offline_partitions(self) -> None:
        changes: dict[TopicPartition, zk.PartitionState] = {}
        for tp, state in sorted(self.ctx.states.items()):
            if tp[0] in self.ctx.deleting:
                continue
            if self.ctx.replica_online(state.leader, tp) and state.leader not in self.ctx.shutting_down:
                continue
            unclean = await self._unclean_allowed(tp[0]) if not any(
                self.ctx.replica_online(r, tp) for r in state.isr) else False
            new = self.offline_leader(tp, unclean)
            if new is not None:
                changes[tp] = new
        if changes:
            self.core.publish(await self.core.write_states(changes))
        missing = [tp for tp in self.ctx.partitions() if tp not in self.ctx.states and tp[0] not in self.ctx.deleting]
        if missing:
            await self.new_partitions(missing)

    async def new_partitions(self, partitions: list[TopicPartition]) -> None:
        """Kafka's initializeLeaderAndIsrForPartitions: leader = first live replica, ISR = the live
        replicas, epoch 0; LeaderAndIsr (IsNew) to them, UpdateMetadata to all."""
        changes = {}
        for tp in partitions:
            live = [r for r in self.ctx.replicas(tp) if self.ctx.replica_online(r, tp)]
            if not live:
                log.warning("no replica of new partition %s-%d is live; it stays offline", *tp)
                continue
            changes[tp] = zk.PartitionState(live[0], 0, live, self.ctx.epoch)
        if changes:
            self.core.publish(await self.core.write_states(changes, create=True), is_new=True)

    async def take_replicas_offline(self, gone: set[int], on_dirs: dict[int, set[TopicPartition]] | None = None) -> None:
        """Partitions led by ``gone`` get a new leader; ``gone`` leaves every ISR (leader epoch +1);
        the last ISR member stays in the ISR with no leader, as Kafka keeps it. ``on_dirs``: replicas
        of live brokers whose log dir failed, taken offline the same way, those partitions alone."""
        dirs = on_dirs or {}
        changes: dict[TopicPartition, zk.PartitionState] = {}
        for tp, state in sorted(self.ctx.states.items()):
            leaving = {r for r in self.ctx.replicas(tp) if r in gone or tp in dirs.get(r, ())}
            if tp[0] in self.ctx.deleting or not leaving:
                continue
            if state.leader in leaving:
                unclean = await self._unclean_allowed(tp[0]) if not any(
                    self.ctx.replica_online(r, tp) and r not in self.ctx.shutting_down and r not in leaving
                    for r in state.isr) else False
                new = self.offline_leader(tp, unclean)
                if new is None:
                    isr = [r for r in state.isr if r not in leaving] or state.isr
                    new = zk.PartitionState(NO_LEADER, state.leader_epoch + 1, isr, self.ctx.epoch, False,
                                            state.zk_version)
                changes[tp] = new
            elif leaving & set(state.isr):
                isr = [r for r in state.isr if r not in leaving]
                changes[tp] = zk.PartitionState(state.leader, state.leader_epoch + 1, isr, self.ctx.epoch,
                                                state.recovering, state.zk_version)
        written = await self.core.write_states(changes) if changes else []
        self.core.publish(written)
        if not written:  # nothing changed: tell everyone who is live anyway
            self.core.send_update_metadata(self.ctx.live, [])

    # --- ElectLeaders and auto-rebalance (Kafka's processReplicaLeaderElection) -------------------
    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        if not self.core.active:
            return {tp: ErrorCode.NOT_CONTROLLER for tp in partitions or []}
        wanted = partitions if partitions is not None else [
            tp for tp, s in sorted(self.ctx.states.items())
            if tp[0] not in self.ctx.deleting and self.ctx.replicas(tp) and (
                s.leader != self.ctx.replicas(tp)[0] if preferred else not self.ctx.replica_online(s.leader, tp))]
        outcome: dict[TopicPartition, ErrorCode] = {}
        changes: dict[TopicPartition, zk.PartitionState] = {}
        for tp in wanted:
            state = self.ctx.states.get(tp)
            replicas = self.ctx.replicas(tp)
            if state is None or not replicas or tp[0] in self.ctx.deleting:
                outcome[tp] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif preferred:
                first = replicas[0]
                if state.leader == first:
                    outcome[tp] = ErrorCode.ELECTION_NOT_NEEDED
                elif (not self.ctx.replica_online(first, tp) or first not in state.isr
                      or first in self.ctx.shutting_down):
                    outcome[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                else:
                    changes[tp] = zk.PartitionState(first, state.leader_epoch + 1, list(state.isr), self.ctx.epoch,
                                                    state.recovering, state.zk_version)
            elif self.ctx.replica_online(state.leader, tp):
                outcome[tp] = ErrorCode.ELECTION_NOT_NEEDED
            else:
                new = self.offline_leader(tp, unclean=True)
                if new is None:
                    outcome[tp] = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                else:
                    changes[tp] = new
        written = await self.core.write_states(changes) if changes else []
        self.core.publish(written)
        for tp in changes:
            outcome[tp] = ErrorCode.NONE if tp in written else ErrorCode.NOT_CONTROLLER
        return outcome

    async def _auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per broker, when more than
        leader.imbalance.per.broker.percentage of the partitions it is preferred for are led by
        others, hand them back (where it is live and in the ISR)."""
        if not self.core.active or self.core.settings.imbalance_percentage < 0:
            return
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp, _state in sorted(self.ctx.states.items()):
            replicas = self.ctx.replicas(tp)
            if replicas and tp[0] not in self.ctx.deleting:
                by_preferred.setdefault(replicas[0], []).append(tp)
        moves = []
        for broker_id, tps in by_preferred.items():
            if broker_id not in self.ctx.live or broker_id in self.ctx.shutting_down:
                continue
            astray = [tp for tp in tps if self.ctx.states[tp].leader != broker_id]
            if astray and len(astray) * 100 / len(tps) > self.core.settings.imbalance_percentage:
                moves += [tp for tp in astray if broker_id in self.ctx.states[tp].isr]
        if moves:
            log.info("controller: auto-rebalance moves %d partition(s) back to their preferred leaders", len(moves))
            await self.elect_leaders(True, moves)

    def schedule_rebalance(self) -> None:
        interval = self.core.settings.imbalance_check_interval_s
        if interval <= 0 or self.core.stopped:
            return

        def tick() -> None:
            if self.core.active:
                self.core.enqueue(self._auto_rebalance)
                self._rebalance_timer = asyncio.get_running_loop().call_later(interval, tick)
        # Kafka's first check comes 5 s after failover, then every interval.
        self._rebalance_timer = asyncio.get_running_loop().call_later(min(5.0, interval), tick)

    # --- controlled shutdown (Kafka's doControlledShutdown) ---------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        if not self.core.active:
            return ErrorCode.NOT_CONTROLLER, []
        info = self.ctx.live.get(broker_id)
        if info is None:
            return ErrorCode.BROKER_NOT_AVAILABLE, []
        if broker_epoch != -1 and broker_epoch < info.epoch:
            return ErrorCode.STALE_BROKER_EPOCH, []
        self.ctx.shutting_down.add(broker_id)
        changes: dict[TopicPartition, zk.PartitionState] = {}
        follower_of: list[TopicPartition] = []
        for tp, state in sorted(self.ctx.states.items()):
            replicas = self.ctx.replicas(tp)
            if broker_id not in replicas or len(replicas) < 2 or tp[0] in self.ctx.deleting:
                continue
            if state.leader == broker_id:
                candidates = [r for r in replicas if r in state.isr and r in self.ctx.live
                              and r not in self.ctx.shutting_down]
                if candidates:
                    changes[tp] = zk.PartitionState(candidates[0], state.leader_epoch + 1,
                                                    [r for r in state.isr if r not in self.ctx.shutting_down],
                                                    self.ctx.epoch, state.recovering, state.zk_version)
            elif broker_id in state.isr:
                changes[tp] = zk.PartitionState(state.leader, state.leader_epoch + 1,
                                                [r for r in state.isr if r != broker_id], self.ctx.epoch,
                                                state.recovering, state.zk_version)
                follower_of.append(tp)
        written = await self.core.write_states(changes) if changes else []
        self.core.publish(written)
        self.core.send_stop_replica(broker_id, [tp for tp in follower_of if tp in written], delete=False)
        # As Kafka: only replicated partitions count (one replica has nowhere to move).
        remaining = [tp for tp, s in sorted(self.ctx.states.items())
                     if s.leader == broker_id and len(self.ctx.replicas(tp)) > 1 and tp[0] not in self.ctx.deleting]
        return ErrorCode.NONE, remaining
