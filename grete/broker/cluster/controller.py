"""The controller, as Kafka 3.9 runs it in ZooKeeper mode (KafkaController).

Every broker runs one; the one that creates the ephemeral ``/controller`` (in one multi with the
increment of ``/controller_epoch``) is active. It keeps the cluster's state in memory (live brokers
with their epochs, assignments, partition states), changes it in ZooKeeper first, and tells the
brokers: LeaderAndIsr to the replicas of each changed partition, then UpdateMetadata to every live
broker, then StopReplica.

Events (a broker came or went, topics created or marked for deletion, partitions added, a
controlled shutdown) are handled one at a time by one task, as Kafka's ControllerEventManager does:
the state has one owner and no event sees another half done. This module runs the events, the
election and failover, and the watches on brokers and topics; its parts are the shared state and
fenced writes (controller_core.py), leader election (leader_election.py), fencing of dead processes
(broker_fencing.py), reassignment (reassignment.py), topic deletion (topic_deletion.py), leaders'
ISR changes (isr_changes.py) and brokers' failed log dirs (log_dir_events.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TypeVar

from grete.broker.cluster.broker_fencing import BrokerFencing
from grete.broker.cluster.channels import ControllerChannels
from grete.broker.cluster.controller_core import ControllerCore, ControllerMoved, ControllerSettings
from grete.broker.cluster.isr_changes import IsrChange, IsrChanges, IsrResult
from grete.broker.cluster.leader_election import LeaderElection
from grete.broker.cluster.log_dir_events import LogDirEvents
from grete.broker.cluster.reassignment import Reassignments
from grete.broker.cluster.state import ControllerContext, TopicPartition
from grete.broker.cluster.topic_deletion import TopicDeletion
from grete.coordinator.metadata import new_topic_id
from grete.coordinator.zookeeper import zk_layout as zk
from grete.coordinator.zookeeper.zk_client import MultiOpError, NodeExistsError, Op, ZkClient, ZookeeperError
from grete.protocol.errors import ErrorCode

__all__ = ["Controller", "ControllerMoved", "ControllerSettings"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Controller:
    def __init__(self, zk_client: ZkClient, settings: ControllerSettings) -> None:
        self.core = ControllerCore(zk_client, settings)
        self.zk = zk_client
        self.settings = settings
        self.broker_id = settings.broker_id
        self.elections = LeaderElection(self.core)
        self.fencing = BrokerFencing(self.core, self._on_broker_failure, self._on_brokers)
        self.reassignment = Reassignments(self.core)
        self.deletion = TopicDeletion(self.core)
        self.isr_changes = IsrChanges(self.core, self.reassignment)
        self.log_dirs = LogDirEvents(self.core, self.elections)
        self._worker: asyncio.Task[None] | None = None
        self._watching = False

    @property
    def active(self) -> bool:
        return self.core.active

    @active.setter
    def active(self, value: bool) -> None:
        self.core.active = value

    @property
    def ctx(self) -> ControllerContext:
        return self.core.ctx

    @ctx.setter
    def ctx(self, value: ControllerContext) -> None:
        self.core.ctx = value

    # --- lifecycle --------------------------------------------------------------------------------
    def startup(self) -> None:
        self._worker = asyncio.ensure_future(self._run_events())
        self.zk.watch_data(zk.CONTROLLER, self._on_controller_znode)

    def unclean_election_enabled(self) -> None:
        """A topic's ``unclean.leader.election.enable`` was turned on: its offline partitions get a
        leader now (Kafka's TopicUncleanLeaderElectionEnable event), not at the next broker change."""
        if self.active:
            self.core.enqueue(self.elections.elect_offline_partitions)

    async def shutdown(self) -> None:
        self.core.stopped = True
        self._resign()
        self.fencing.watch({})
        if self._worker is not None:
            self._worker.cancel()

    def session_lost(self) -> None:
        """The ZooKeeper session expired: resign at once (Kafka's Expire event); the broker
        re-registers and this controller runs for election again once the /controller watch fires."""
        self._resign()
        self.core.enqueue(self._elect)

    async def _run_events(self) -> None:
        while True:
            event = await self.core.events.get()
            try:
                await event()
            except ControllerMoved:
                log.warning("broker %d: another controller was elected; resigning", self.broker_id)
                self._resign()
            except ZookeeperError as exc:
                # The session broke (expiry, connection loss): session_lost resigns and re-elects.
                log.warning("controller event stopped: ZooKeeper failed: %r", exc)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller event failed")

    # --- election (Kafka's elect()) ---------------------------------------------------------------
    def _on_controller_znode(self, data: bytes | None, _stat: object) -> None:
        if data is None:
            self.core.active_controller_id = -1
            self.core.enqueue(self._elect)
            return
        try:
            self.core.active_controller_id = zk.decode_controller(data)
        except (ValueError, KeyError):
            return
        if self.active and self.core.active_controller_id != self.broker_id:
            self._resign()
        if not self.active:
            self.core.enqueue(self.fencing.watch_controller)

    async def _elect(self) -> None:
        if self.active or self.core.stopped:
            return
        found = await self.zk.get(zk.CONTROLLER)
        if found is not None:
            self.core.active_controller_id = zk.decode_controller(found[0])
            return
        epoch_found = await self.zk.get(zk.CONTROLLER_EPOCH)
        if epoch_found is None:
            try:
                await self.zk.create(zk.CONTROLLER_EPOCH, zk.encode_controller_epoch(0))
            except NodeExistsError:
                pass
            epoch_found = await self.zk.get(zk.CONTROLLER_EPOCH)
            assert epoch_found is not None
        epoch = zk.decode_controller_epoch(epoch_found[0]) + 1
        try:
            results = await self.zk.multi([
                Op("create", zk.CONTROLLER, zk.encode_controller(self.broker_id, int(time.time() * 1000)),
                   ephemeral=True),
                Op("set", zk.CONTROLLER_EPOCH, zk.encode_controller_epoch(epoch), epoch_found[1].version)])
        except MultiOpError:
            found = await self.zk.get(zk.CONTROLLER)
            self.core.active_controller_id = zk.decode_controller(found[0]) if found else -1
            return
        self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=results[1].version, controller_id=self.broker_id)
        self.active = True
        self.core.active_controller_id = self.broker_id
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        await self._on_failover()

    def _resign(self) -> None:
        if self.active:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.ctx.epoch)
        self.active = False
        self.elections.cancel_rebalance()
        if self.core.channels is not None:
            self.core.channels.close()
            self.core.channels = None
        self.fencing.watch({})

    # --- failover (Kafka's onControllerFailover) --------------------------------------------------
    async def _on_failover(self) -> None:
        await self._setup_features()
        self.core.channels = ControllerChannels(self.settings.inter_broker_listener, self.broker_id)
        registered = await self._registered(await self.zk.children(zk.BROKER_IDS))
        for info in registered.values():
            if self.fencing.fenced.get(info.id) != info.epoch:
                self.ctx.live[info.id] = info
                self.core.channels.add_broker(info)
        self.fencing.watch(registered)
        for topic in await self.zk.children(zk.BROKER_TOPICS):
            await self._load_topic(topic)
        self.ctx.deleting = set(await self.zk.children(zk.DELETE_TOPICS))
        self.reassignment.resume()
        # Brokers must know every live broker before a LeaderAndIsr makes them follow one.
        self.core.send_update_metadata(self.ctx.live, [])
        for broker_id in self.ctx.live:
            self.core.send_leader_and_isr(broker_id, self.ctx.partitions_on(broker_id))
        self.core.send_update_metadata(self.ctx.live, self.ctx.partitions())
        # Replicas on brokers that are gone leave their ISRs, leaders they held are replaced
        # (Kafka's replica state machine start-up: OfflineReplica), then offline and new
        # partitions get leaders.
        dead = {r for tp in self.ctx.partitions() for r in self.ctx.replicas(tp)} - set(self.ctx.live)
        if dead:
            await self.elections.take_replicas_offline(dead)
        await self.elections.elect_offline_partitions()
        for tp in list(self.reassignment.targets):
            await self.reassignment.maybe_complete(tp)
        self.elections.schedule_rebalance()
        if not self._watching:
            self._watching = True
            self.zk.watch_children(zk.BROKER_IDS, lambda c: self.core.enqueue(lambda: self._on_brokers(c)))
            self.zk.watch_children(zk.BROKER_TOPICS, lambda c: self.core.enqueue(lambda: self._on_topics(c)))
            self.zk.watch_children(zk.DELETE_TOPICS, lambda c: self.core.enqueue(lambda: self.deletion.on_deletions(c)))
            self.zk.watch_children(zk.LOG_DIR_EVENT_NOTIFICATION,
                                   lambda c: self.core.enqueue(lambda: self.log_dirs.on_notifications(c)))
        else:
            self.core.enqueue(self._refresh_all)

    async def _refresh_all(self) -> None:
        await self._on_brokers(await self.zk.children(zk.BROKER_IDS))
        await self._on_topics(await self.zk.children(zk.BROKER_TOPICS))
        await self.deletion.on_deletions(await self.zk.children(zk.DELETE_TOPICS))
        await self.log_dirs.on_notifications(await self.zk.children(zk.LOG_DIR_EVENT_NOTIFICATION))

    async def _setup_features(self) -> None:
        """Create /feature as a 3.9 controller does (finalized metadata.version 21, kraft.version 0),
        or keep what is there."""
        if await self.zk.exists(zk.FEATURE) is None:
            try:
                await self.zk.create(zk.FEATURE, zk.encode_feature(zk.FINALIZED_FEATURES))
            except NodeExistsError:
                pass

    async def _load_topic(self, topic: str) -> None:
        found = await self.zk.get(zk.topic_path(topic))
        if found is None:
            return
        assignment = zk.decode_topic(found[0])
        if assignment.topic_id is None:  # written by an old tool: give it an id, as Kafka does
            assignment.topic_id = new_topic_id()
            await self.core.fenced([Op("set", zk.topic_path(topic), zk.encode_topic(assignment), found[1].version)])
        self.ctx.assignments[topic] = assignment
        for partition in assignment.partitions:
            state = await self.zk.get(zk.partition_state_path(topic, partition))
            if state is not None:
                self.ctx.states[(topic, partition)] = zk.decode_partition_state(state[0], state[1].version)
        self.zk.watch_data(zk.topic_path(topic), lambda data, _s: self.core.enqueue(
                lambda: self._on_topic_data(topic, data)) if data is not None else None)

    # --- brokers and topics coming and going (the watches on /brokers/ids and /brokers/topics) ----
    async def _on_brokers(self, children: list[str]) -> None:
        if not self.active:
            return
        registered = await self._registered(children)
        self.fencing.watch(registered)
        current = {b: info for b, info in registered.items() if self.fencing.fenced.get(b) != info.epoch}
        dead = [b for b in self.ctx.live if b not in current]
        bounced = [b for b, info in current.items() if b in self.ctx.live and info.epoch != self.ctx.live[b].epoch]
        new = [b for b in current if b not in self.ctx.live]
        if dead or bounced:
            await self._on_broker_failure(dead + bounced)
        for broker_id in new + bounced:
            self.ctx.live[broker_id] = current[broker_id]
            assert self.core.channels is not None
            self.core.channels.add_broker(current[broker_id])
        if new or bounced:
            await self._on_broker_startup(new + bounced)

    async def _registered(self, children: list[str]) -> dict[int, zk.BrokerInfo]:
        """The registrations under /brokers/ids; fences of registrations that are gone are forgotten."""
        found = {}
        for child in children:
            info = await self.core.read_broker(int(child))
            if info is not None:
                found[info.id] = info
        self.fencing.forget_gone(found)
        return found

    async def _on_broker_failure(self, brokers: list[int]) -> None:
        log.info("controller: broker(s) %s left the cluster", brokers)
        for broker_id in brokers:
            self.ctx.live.pop(broker_id, None)
            self.ctx.shutting_down.discard(broker_id)
            if self.core.channels is not None:
                self.core.channels.remove_broker(broker_id)
        await self.elections.take_replicas_offline(set(brokers))

    async def _on_broker_startup(self, brokers: list[int]) -> None:
        log.info("controller: broker(s) %s joined the cluster", brokers)
        for broker_id in brokers:
            self.log_dirs.broker_started(broker_id)
        others = [b for b in self.ctx.live if b not in brokers]
        self.core.send_update_metadata(others, [])
        self.core.send_update_metadata(brokers, self.ctx.partitions())
        for broker_id in brokers:
            self.core.send_leader_and_isr(broker_id, self.ctx.partitions_on(broker_id))
        await self.elections.elect_offline_partitions()
        await self.deletion.resume()

    async def _on_topics(self, children: list[str]) -> None:
        if not self.active:
            return
        new = [t for t in children if t not in self.ctx.assignments]
        for topic in set(self.ctx.assignments) - set(children):
            self.core.forget_topic(topic)
        for topic in new:
            await self._load_topic(topic)
        fresh = [tp for topic in new for tp in self.ctx.partitions() if tp[0] == topic and tp not in self.ctx.states]
        if fresh:
            await self.elections.new_partitions(fresh)
        if new:
            log.info("controller: new topic(s) %s", new)

    async def _on_topic_data(self, topic: str, data: bytes) -> None:
        if not self.active or topic not in self.ctx.assignments:
            return
        assignment = zk.decode_topic(data)
        known = self.ctx.assignments[topic]
        if assignment.topic_id is None:
            return  # being given an id (by us, in _load_topic)
        added = [p for p in assignment.partitions if p not in known.partitions]
        self.ctx.assignments[topic] = assignment
        if added:
            log.info("controller: %d partition(s) added to %s", len(added), topic)
            await self.elections.new_partitions([(topic, p) for p in sorted(added)])

    # --- requests, each run as a controller event ----------------------------------------------
    def producer_id_asker_error(self, broker_id: int, broker_epoch: int) -> ErrorCode:
        """Kafka's processAllocateProducerIds checks: the active controller, a registered broker, its
        current epoch."""
        if not self.active:
            return ErrorCode.NOT_CONTROLLER
        info = self.ctx.live.get(broker_id)
        if info is None:
            return ErrorCode.BROKER_ID_NOT_REGISTERED
        if info.epoch != broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        return ErrorCode.NONE

    async def alter_partition(self, broker_id: int, broker_epoch: int,
                              changes: list[IsrChange]) -> tuple[ErrorCode, list[IsrResult]]:
        """Apply leaders' ISR proposals, as a controller event; the top-level error and, per
        partition, the outcome and the state it leaves (UpdateMetadata goes to every broker)."""
        return await self.core.call(lambda: self.isr_changes.alter_partition(broker_id, broker_epoch, changes),
                                    lambda exc: _not_controller(exc, (ErrorCode.NOT_CONTROLLER, [])))

    async def reassign(self, targets: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """Start (a replica list) or cancel (None) reassignments, as a controller event."""
        return await self.core.call(lambda: self.reassignment.reassign(targets),
                                    lambda _exc: {tp: (ErrorCode.NOT_CONTROLLER, None) for tp in targets})

    def reassignments(self) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """Ongoing reassignments: (replicas, adding, removing) per partition."""
        return self.reassignment.ongoing()

    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        """PREFERRED: move leadership to the first assigned replica if it is live and in the ISR;
        UNCLEAN: give a partition without a live leader the first live replica. ``None`` means every
        partition, answered only for those elected. Runs as a controller event."""
        return await self.core.call(lambda: self.elections.elect_leaders(preferred, partitions),
                                    lambda _exc: {tp: ErrorCode.NOT_CONTROLLER for tp in partitions or []})

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        """Move leadership off ``broker_id``; the partitions it still leads. Runs as a controller event."""
        return await self.core.call(lambda: self.elections.controlled_shutdown(broker_id, broker_epoch),
                                    lambda exc: _not_controller(exc, (ErrorCode.NOT_CONTROLLER, [])))


def _not_controller(exc: ZookeeperError, answer: T) -> T:
    """The session broke under a request: this broker is not the controller now."""
    log.warning("controller: ZooKeeper failed during a request: %r", exc)
    return answer
