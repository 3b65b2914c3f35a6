"""What every part of the controller shares: its ZooKeeper client and settings, whether it is active
and the context and channels of its current term, its event queue; and its two outputs, fenced
ZooKeeper writes and the requests it sends to brokers (LeaderAndIsr, UpdateMetadata, StopReplica).

Every write is fenced: a multi that checks ``/controller_epoch``'s version (a controller that lost its
place cannot write), and partition states are set conditionally on their own version (the partition
epoch).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from grete.broker.cluster import requests as build
from grete.broker.cluster.channels import ControllerChannels
from grete.broker.cluster.state import ControllerContext, TopicPartition
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import MultiOpError, Op, ZkClient, ZookeeperError
from grete.protocol.messages import LeaderAndIsrResponse

log = logging.getLogger(__name__)

NO_LEADER = -1

T = TypeVar("T")


class ControllerMoved(Exception):
    """Another controller has been elected: this one must stop acting."""


@dataclass
class ControllerSettings:
    broker_id: int
    inter_broker_listener: str
    delete_topic_enable: bool = True
    unclean_leader_election: bool = False
    # auto.leader.rebalance.enable (-1 percentage: off), leader.imbalance.* settings
    imbalance_percentage: int = 10
    imbalance_check_interval_s: float = 300.0
    # grete.fast.failover.enable: act on a dead process's evidence (liveness.py) at once
    # instead of waiting for its ZooKeeper session to expire
    detect_process_death: bool = True


class ControllerCore:
    def __init__(self, zk_client: ZkClient, settings: ControllerSettings) -> None:
        self.zk = zk_client
        self.settings = settings
        self.broker_id = settings.broker_id
        self.active = False
        self.active_controller_id = -1
        self.ctx = ControllerContext()
        self.channels: ControllerChannels | None = None
        self.stopped = False
        self.events: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        # Every broker's answer to a LeaderAndIsr (the replicas it could not serve: a failed log dir).
        self.leader_and_isr_answered: Callable[[int, LeaderAndIsrResponse], None] | None = None

    # --- events ------------------------------------------------------------------------------------
    def enqueue(self, event: Callable[[], Awaitable[None]]) -> None:
        if not self.stopped:
            self.events.put_nowait(event)

    async def call(self, work: Callable[[], Awaitable[T]], when_zk_fails: Callable[[ZookeeperError], T]) -> T:
        """Run ``work`` as a controller event; its answer, or ``when_zk_fails``'s if the session broke under it."""
        result: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def event() -> None:
            try:
                result.set_result(await work())
            except ZookeeperError as exc:
                result.set_result(when_zk_fails(exc))
            except BaseException as exc:
                result.set_exception(exc)
                raise
        self.enqueue(event)
        return await result

    # --- fenced writes ----------------------------------------------------------------------------
    async def fenced(self, ops: list[Op]) -> list[object]:
        """``ops`` in one multi with the controller-epoch check in front; ControllerMoved if another
        controller has been elected since."""
        try:
            results = await self.zk.multi([Op("check", zk.CONTROLLER_EPOCH, version=self.ctx.epoch_zk_version), *ops])
        except MultiOpError as exc:
            if exc.index == 0:
                raise ControllerMoved() from None
            raise
        return results[1:]

    async def write_states(self, changes: dict[TopicPartition, zk.PartitionState], *, create: bool = False) -> list[TopicPartition]:
        """Write new partition states (conditional on their versions); the partitions written."""
        written = []
        for tp, state in sorted(changes.items()):
            state.controller_epoch = self.ctx.epoch
            path = zk.partition_state_path(*tp)
            try:
                if create:
                    await self.zk.ensure_path(path.rsplit("/", 1)[0])
                    await self.fenced([Op("create", path, zk.encode_partition_state(state))])
                    state.zk_version = 0
                else:
                    results = await self.fenced([Op("set", path, zk.encode_partition_state(state), state.zk_version)])
                    state.zk_version = results[0].version  # type: ignore[attr-defined]
            except MultiOpError as exc:
                log.warning("could not write the state of %s-%d (%s); reading it again", tp[0], tp[1],
                            type(exc.error).__name__)
                current = await self.zk.get(path)
                if current is not None:
                    self.ctx.states[tp] = zk.decode_partition_state(current[0], current[1].version)
                continue
            self.ctx.states[tp] = state
            written.append(tp)
        return written

    async def read_broker(self, broker_id: int) -> zk.BrokerInfo | None:
        found = await self.zk.get(zk.broker_path(broker_id))
        if found is None:
            return None
        return zk.decode_broker(broker_id, found[0], found[1].czxid)

    def forget_topic(self, topic: str) -> None:
        assignment = self.ctx.assignments.pop(topic, None)
        if assignment is not None:
            for partition in assignment.partitions:
                self.ctx.states.pop((topic, partition), None)

    # --- sending ----------------------------------------------------------------------------------
    def send_leader_and_isr(self, broker_id: int, partitions: Iterable[TopicPartition], *, is_new: bool = False) -> None:
        info = self.ctx.live.get(broker_id)
        if info is None or self.channels is None:
            return
        request = build.leader_and_isr(self.ctx, broker_id, info.epoch, [tp for tp in partitions if tp in self.ctx.states],
                                       self.settings.inter_broker_listener, is_new)
        if request is not None:
            answered = self.leader_and_isr_answered
            self.channels.send(broker_id, request, build.LEADER_AND_ISR_VERSION,
                               None if answered is None else lambda response: answered(broker_id, response))

    def send_update_metadata(self, brokers: Iterable[int], partitions: Iterable[TopicPartition],
                             *, deleting: Iterable[TopicPartition] = ()) -> None:
        if self.channels is None:
            return
        parts, gone = list(partitions), list(deleting)
        for broker_id in list(brokers):
            info = self.ctx.live.get(broker_id)
            if info is not None:
                self.channels.send(broker_id, build.update_metadata(self.ctx, info.epoch, parts, gone),
                                   build.UPDATE_METADATA_VERSION)

    def send_stop_replica(self, broker_id: int, partitions: list[TopicPartition], *, delete: bool,
                          on_done: Callable[[object], None] | None = None) -> None:
        info = self.ctx.live.get(broker_id)
        if info is None or self.channels is None or not partitions:
            return
        request = build.stop_replica(self.ctx, info.epoch, partitions, delete)
        self.channels.send(broker_id, request, build.STOP_REPLICA_VERSION, on_done)

    def publish(self, changed: list[TopicPartition], *, is_new: bool = False) -> None:
        """LeaderAndIsr to every live replica of the changed partitions, then UpdateMetadata to all."""
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in changed:
            for replica in self.ctx.replicas(tp):
                # A broker shutting down is told nothing more (Kafka sends only to live replicas,
                # not shutting-down ones): it must not start following, and rejoin an ISR, on its way out.
                if replica not in self.ctx.shutting_down:
                    by_broker.setdefault(replica, []).append(tp)
        for broker_id, tps in sorted(by_broker.items()):
            self.send_leader_and_isr(broker_id, tps, is_new=is_new)
        self.send_update_metadata(self.ctx.live, changed)
