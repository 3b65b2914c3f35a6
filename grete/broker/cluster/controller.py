"""The controller, as Kafka 3.9 runs it in ZooKeeper mode (KafkaController).

Every broker runs one; the one that creates the ephemeral ``/controller`` (in one multi with the
increment of ``/controller_epoch``) is active. It keeps the cluster's state in memory (live brokers
with their epochs, assignments, partition states), changes it in ZooKeeper first, and tells the
brokers: LeaderAndIsr to the replicas of each changed partition, then UpdateMetadata to every live
broker, then StopReplica.

Events (a broker came or went, topics created or marked for deletion, partitions added, a
controlled shutdown) are handled one at a time by one task, as Kafka's ControllerEventManager does:
the state has one owner and no event sees another half done. Every write is fenced: a multi that
checks ``/controller_epoch``'s version (a controller that lost its place cannot write), and partition
states are set conditionally on their own version (the partition epoch).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

from grete.broker.cluster import requests as build
from grete.broker.cluster.channels import ControllerChannels
from grete.broker.cluster.liveness import ProcessWatch
from grete.broker.cluster.state import ControllerContext, TopicPartition
from grete.coordinator import zk_layout as zk
from grete.coordinator.metadata import new_topic_id
from grete.coordinator.zk_client import (
    MultiOpError,
    NodeExistsError,
    NoNodeError,
    Op,
    ZkClient,
    ZookeeperError,
)
from grete.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

NO_LEADER = -1


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


class Controller:
    def __init__(self, zk_client: ZkClient, settings: ControllerSettings) -> None:
        self.zk = zk_client
        self.settings = settings
        self.broker_id = settings.broker_id
        self.active = False
        self.active_controller_id = -1
        self.ctx = ControllerContext()
        self.channels: ControllerChannels | None = None
        self._events: asyncio.Queue[Callable[[], Awaitable[None]]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._watching = False
        self._stopped = False
        self._rebalance_timer: asyncio.TimerHandle | None = None
        self._targets: dict[TopicPartition, list[int]] = {}  # reassignments under way
        # Registrations (broker id -> epoch) whose process was seen dead: treated as gone until the
        # znode goes (session expiry) or its port answers again. Kept across elections: the broker
        # that saw the controller die may be the next controller.
        self.fenced: dict[int, int] = {}
        self._watches: dict[int, tuple[int, ProcessWatch]] = {}

    # --- lifecycle ---------------------------------------------------------------------------
    def startup(self) -> None:
        self._worker = asyncio.ensure_future(self._run_events())
        self.zk.watch_data(zk.CONTROLLER, self._on_controller_znode)

    async def shutdown(self) -> None:
        self._stopped = True
        self._resign()
        self._watch({})
        if self._worker is not None:
            self._worker.cancel()

    def session_lost(self) -> None:
        """The ZooKeeper session expired: resign at once (Kafka's Expire event); the broker
        re-registers and this controller runs for election again once the /controller watch fires."""
        self._resign()
        self._enqueue(self._elect)

    def _enqueue(self, event: Callable[[], Awaitable[None]]) -> None:
        if not self._stopped:
            self._events.put_nowait(event)

    async def _run_events(self) -> None:
        while True:
            event = await self._events.get()
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

    # --- election (Kafka's elect()) -------------------------------------------------------------
    def _on_controller_znode(self, data: bytes | None, _stat: object) -> None:
        if data is None:
            self.active_controller_id = -1
            self._enqueue(self._elect)
            return
        try:
            self.active_controller_id = zk.decode_controller(data)
        except (ValueError, KeyError):
            return
        if self.active and self.active_controller_id != self.broker_id:
            self._resign()
        if not self.active:
            self._enqueue(self._watch_controller)

    async def _elect(self) -> None:
        if self.active or self._stopped:
            return
        found = await self.zk.get(zk.CONTROLLER)
        if found is not None:
            self.active_controller_id = zk.decode_controller(found[0])
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
            self.active_controller_id = zk.decode_controller(found[0]) if found else -1
            return
        self.ctx = ControllerContext(epoch=epoch, epoch_zk_version=results[1].version, controller_id=self.broker_id)
        self.active = True
        self.active_controller_id = self.broker_id
        log.info("broker %d is the controller (epoch %d)", self.broker_id, epoch)
        await self._on_failover()

    def _resign(self) -> None:
        if self.active:
            log.info("broker %d resigns as controller (epoch %d)", self.broker_id, self.ctx.epoch)
        self.active = False
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        if self.channels is not None:
            self.channels.close()
            self.channels = None
        self._watch({})

    # --- failover (Kafka's onControllerFailover) -------------------------------------------------
    async def _on_failover(self) -> None:
        await self._setup_features()
        self.channels = ControllerChannels(self.settings.inter_broker_listener, self.broker_id)
        registered = await self._registered(await self.zk.children(zk.BROKER_IDS))
        for info in registered.values():
            if self.fenced.get(info.id) != info.epoch:
                self.ctx.live[info.id] = info
                self.channels.add_broker(info)
        self._watch(registered)
        for topic in await self.zk.children(zk.BROKER_TOPICS):
            await self._load_topic(topic)
        self.ctx.deleting = set(await self.zk.children(zk.DELETE_TOPICS))
        # Reassignments a previous controller started (the topic znodes' adding/removing lists).
        self._targets = {(t, p): [r for r in a.partitions[p] if r not in a.removing.get(p, [])]
                         for t, a in self.ctx.assignments.items() for p in set(a.adding) | set(a.removing)
                         if p in a.partitions}
        # Brokers must know every live broker before a LeaderAndIsr makes them follow one.
        self._send_update_metadata(self.ctx.live, [])
        for broker_id in self.ctx.live:
            self._send_leader_and_isr(broker_id, self.ctx.partitions_on(broker_id))
        self._send_update_metadata(self.ctx.live, self.ctx.partitions())
        # Replicas on brokers that are gone leave their ISRs, leaders they held are replaced
        # (Kafka's replica state machine start-up: OfflineReplica), then offline and new
        # partitions get leaders.
        dead = {r for tp in self.ctx.partitions() for r in self.ctx.replicas(tp)} - set(self.ctx.live)
        if dead:
            await self._take_replicas_offline(dead)
        await self._elect_offline_partitions()
        for tp in list(self._targets):
            await self._maybe_complete_reassignment(tp)
        self._schedule_rebalance()
        if not self._watching:
            self._watching = True
            self.zk.watch_children(zk.BROKER_IDS, lambda c: self._enqueue(lambda: self._on_brokers(c)))
            self.zk.watch_children(zk.BROKER_TOPICS, lambda c: self._enqueue(lambda: self._on_topics(c)))
            self.zk.watch_children(zk.DELETE_TOPICS, lambda c: self._enqueue(lambda: self._on_deletions(c)))
        else:
            self._enqueue(self._refresh_all)

    async def _refresh_all(self) -> None:
        await self._on_brokers(await self.zk.children(zk.BROKER_IDS))
        await self._on_topics(await self.zk.children(zk.BROKER_TOPICS))
        await self._on_deletions(await self.zk.children(zk.DELETE_TOPICS))

    async def _setup_features(self) -> None:
        """Create /feature as a 3.9 controller does (finalized metadata.version 21, kraft.version 0),
        or keep what is there."""
        if await self.zk.exists(zk.FEATURE) is None:
            try:
                await self.zk.create(zk.FEATURE, zk.encode_feature(zk.FINALIZED_FEATURES))
            except NodeExistsError:
                pass

    async def _read_broker(self, broker_id: int) -> zk.BrokerInfo | None:
        found = await self.zk.get(zk.broker_path(broker_id))
        if found is None:
            return None
        return zk.decode_broker(broker_id, found[0], found[1].czxid)

    async def _load_topic(self, topic: str) -> None:
        found = await self.zk.get(zk.topic_path(topic))
        if found is None:
            return
        assignment = zk.decode_topic(found[0])
        if assignment.topic_id is None:  # written by an old tool: give it an id, as Kafka does
            assignment.topic_id = new_topic_id()
            await self._fenced([Op("set", zk.topic_path(topic), zk.encode_topic(assignment), found[1].version)])
        self.ctx.assignments[topic] = assignment
        for partition in assignment.partitions:
            state = await self.zk.get(zk.partition_state_path(topic, partition))
            if state is not None:
                self.ctx.states[(topic, partition)] = zk.decode_partition_state(state[0], state[1].version)
        self.zk.watch_data(zk.topic_path(topic), lambda data, _s: self._enqueue(
            lambda: self._on_topic_data(topic, data)) if data is not None else None)

    # --- fenced writes ---------------------------------------------------------------------------
    async def _fenced(self, ops: list[Op]) -> list[object]:
        """``ops`` in one multi with the controller-epoch check in front; ControllerMoved if another
        controller has been elected since."""
        try:
            results = await self.zk.multi([Op("check", zk.CONTROLLER_EPOCH, version=self.ctx.epoch_zk_version), *ops])
        except MultiOpError as exc:
            if exc.index == 0:
                raise ControllerMoved() from None
            raise
        return results[1:]

    async def _write_states(self, changes: dict[TopicPartition, zk.PartitionState], *, create: bool = False) -> list[TopicPartition]:
        """Write new partition states (conditional on their versions); the partitions written."""
        written = []
        for tp, state in sorted(changes.items()):
            state.controller_epoch = self.ctx.epoch
            path = zk.partition_state_path(*tp)
            try:
                if create:
                    await self.zk.ensure_path(path.rsplit("/", 1)[0])
                    await self._fenced([Op("create", path, zk.encode_partition_state(state))])
                    state.zk_version = 0
                else:
                    results = await self._fenced([Op("set", path, zk.encode_partition_state(state), state.zk_version)])
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

    # --- sending ---------------------------------------------------------------------------------
    def _send_leader_and_isr(self, broker_id: int, partitions: Iterable[TopicPartition], *, is_new: bool = False) -> None:
        info = self.ctx.live.get(broker_id)
        if info is None or self.channels is None:
            return
        request = build.leader_and_isr(self.ctx, broker_id, info.epoch, [tp for tp in partitions if tp in self.ctx.states],
                                       self.settings.inter_broker_listener, is_new)
        if request is not None:
            self.channels.send(broker_id, request, build.LEADER_AND_ISR_VERSION)

    def _send_update_metadata(self, brokers: Iterable[int], partitions: Iterable[TopicPartition],
                              *, deleting: Iterable[TopicPartition] = ()) -> None:
        if self.channels is None:
            return
        parts, gone = list(partitions), list(deleting)
        for broker_id in list(brokers):
            info = self.ctx.live.get(broker_id)
            if info is not None:
                self.channels.send(broker_id, build.update_metadata(self.ctx, info.epoch, parts, gone),
                                   build.UPDATE_METADATA_VERSION)

    def _send_stop_replica(self, broker_id: int, partitions: list[TopicPartition], *, delete: bool,
                           on_done: Callable[[object], None] | None = None) -> None:
        info = self.ctx.live.get(broker_id)
        if info is None or self.channels is None or not partitions:
            return
        request = build.stop_replica(self.ctx, info.epoch, partitions, delete)
        self.channels.send(broker_id, request, build.STOP_REPLICA_VERSION, on_done)

    def _publish(self, changed: list[TopicPartition], *, is_new: bool = False) -> None:
        """LeaderAndIsr to every live replica of the changed partitions, then UpdateMetadata to all."""
        by_broker: dict[int, list[TopicPartition]] = {}
        for tp in changed:
            for replica in self.ctx.replicas(tp):
                # A broker shutting down is told nothing more (Kafka sends only to live replicas,
                # not shutting-down ones): it must not start following, and rejoin an ISR, on its way out.
                if replica not in self.ctx.shutting_down:
                    by_broker.setdefault(replica, []).append(tp)
        for broker_id, tps in sorted(by_broker.items()):
            self._send_leader_and_isr(broker_id, tps, is_new=is_new)
        self._send_update_metadata(self.ctx.live, changed)

    # --- leader election (Kafka's PartitionLeaderElectionAlgorithms) -----------------------------
    def _offline_leader(self, tp: TopicPartition, unclean: bool) -> zk.PartitionState | None:
        """A new state for a partition whose leader is gone, or None if no replica can lead it."""
        state = self.ctx.states[tp]
        live = [r for r in self.ctx.replicas(tp) if r in self.ctx.live and r not in self.ctx.shutting_down]
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
        found = await self.zk.get(zk.config_path("topics", topic))
        configs = zk.decode_config(found[0]) if found and found[0] else {}
        value = configs.get("unclean.leader.election.enable")
        return value.lower() == "true" if value is not None else self.settings.unclean_leader_election

    async def _elect_offline_partitions(self) -> None:
        changes: dict[TopicPartition, zk.PartitionState] = {}
        for tp, state in sorted(self.ctx.states.items()):
            if tp[0] in self.ctx.deleting:
                continue
            if state.leader in self.ctx.live and state.leader not in self.ctx.shutting_down:
                continue
            unclean = await self._unclean_allowed(tp[0]) if not any(
                r in self.ctx.live for r in state.isr) else False
            new = self._offline_leader(tp, unclean)
            if new is not None:
                changes[tp] = new
        if changes:
            self._publish(await self._write_states(changes))
        missing = [tp for tp in self.ctx.partitions() if tp not in self.ctx.states and tp[0] not in self.ctx.deleting]
        if missing:
            await self._new_partitions(missing)

    async def _new_partitions(self, partitions: list[TopicPartition]) -> None:
        """Kafka's initializeLeaderAndIsrForPartitions: leader = first live replica, ISR = the live
        replicas, epoch 0; LeaderAndIsr (IsNew) to them, UpdateMetadata to all."""
        changes = {}
        for tp in partitions:
            live = [r for r in self.ctx.replicas(tp) if r in self.ctx.live]
            if not live:
                log.warning("no replica of new partition %s-%d is live; it stays offline", *tp)
                continue
            changes[tp] = zk.PartitionState(live[0], 0, live, self.ctx.epoch)
        if changes:
            self._publish(await self._write_states(changes, create=True), is_new=True)

    # --- events ------------------------------------------------------------------------------------
    async def _on_brokers(self, children: list[str]) -> None:
        if not self.active:
            return
        registered = await self._registered(children)
        self._watch(registered)
        current = {b: info for b, info in registered.items() if self.fenced.get(b) != info.epoch}
        dead = [b for b in self.ctx.live if b not in current]
        bounced = [b for b, info in current.items() if b in self.ctx.live and info.epoch != self.ctx.live[b].epoch]
        new = [b for b in current if b not in self.ctx.live]
        if dead or bounced:
            await self._on_broker_failure(dead + bounced)
        for broker_id in new + bounced:
            self.ctx.live[broker_id] = current[broker_id]
            assert self.channels is not None
            self.channels.add_broker(current[broker_id])
        if new or bounced:
            await self._on_broker_startup(new + bounced)

    async def _registered(self, children: list[str]) -> dict[int, zk.BrokerInfo]:
        """The registrations under /brokers/ids; fences of registrations that are gone are forgotten."""
        found = {}
        for child in children:
            info = await self._read_broker(int(child))
            if info is not None:
                found[info.id] = info
        for broker_id, epoch in list(self.fenced.items()):
            if broker_id not in found or found[broker_id].epoch != epoch:
                del self.fenced[broker_id]
        return found

    # --- a dead process, told from its evidence (liveness.py) -------------------------------------
    def _watch(self, targets: dict[int, zk.BrokerInfo]) -> None:
        """Watch the processes of ``targets`` (not this broker's own), and no others."""
        if not self.settings.detect_process_death:
            targets = {}
        for broker_id, (epoch, watch) in list(self._watches.items()):
            if broker_id not in targets or targets[broker_id].epoch != epoch:
                watch.close()
                del self._watches[broker_id]
        for broker_id, info in targets.items():
            endpoint = info.endpoint(self.settings.inter_broker_listener)
            if broker_id == self.broker_id or broker_id in self._watches or endpoint is None:
                continue
            self._watches[broker_id] = (info.epoch, ProcessWatch(
                endpoint.host, endpoint.port, self._event(self._on_process_death, broker_id, info.epoch),
                self._event(self._on_process_back, broker_id, info.epoch)))

    def _event(self, handler: Callable[[int, int], Awaitable[None]], broker_id: int, epoch: int) -> Callable[[], None]:
        def enqueue() -> None:
            self._enqueue(lambda: handler(broker_id, epoch))
        return enqueue

    async def _watch_controller(self) -> None:
        """Not the controller: watch the active one's process."""
        if self.active:
            return
        controller = self.active_controller_id
        info = await self._read_broker(controller) if controller >= 0 else None
        if not self.active and controller == self.active_controller_id:
            self._watch({controller: info} if info is not None else {})

    async def _on_process_death(self, broker_id: int, epoch: int) -> None:
        if self.active:
            if (info := self.ctx.live.get(broker_id)) is None or info.epoch != epoch:
                return
            log.warning("controller: broker %d's connection ended and its port refuses connections: its "
                        "process is gone; fencing registration epoch %d now, not at its session's expiry",
                        broker_id, epoch)
            self.fenced[broker_id] = epoch
            await self._on_broker_failure([broker_id])
        elif broker_id == self.active_controller_id:
            log.warning("broker %d: the controller's (broker %d) connection ended and its port refuses "
                        "connections: its process is gone; electing a new controller now", self.broker_id, broker_id)
            self.fenced[broker_id] = epoch
            await self._unseat_controller(broker_id)

    async def _unseat_controller(self, broker_id: int) -> None:
        """Delete /controller if ``broker_id`` still holds it, fenced by /controller_epoch's version:
        read before /controller, it changes with every election, so a controller elected since can
        never be unseated by this evidence."""
        epoch_found = await self.zk.get(zk.CONTROLLER_EPOCH)
        found = await self.zk.get(zk.CONTROLLER)
        if epoch_found is None or found is None or zk.decode_controller(found[0]) != broker_id:
            return
        try:
            await self.zk.multi([Op("check", zk.CONTROLLER_EPOCH, version=epoch_found[1].version),
                                 Op("delete", zk.CONTROLLER, version=found[1].version)])
        except MultiOpError:
            pass  # another broker was quicker, or an election happened: nothing to do

    async def _on_process_back(self, broker_id: int, epoch: int) -> None:
        """A fenced broker's port answers again under the same registration (a listener that was
        closed, not a dead process): it joins again as a broker that started."""
        if self.fenced.get(broker_id) != epoch:
            return
        del self.fenced[broker_id]
        log.info("broker %d answers again (registration epoch %d): no longer fenced", broker_id, epoch)
        if self.active:
            await self._on_brokers(await self.zk.children(zk.BROKER_IDS))

    async def _on_broker_failure(self, brokers: list[int]) -> None:
        log.info("controller: broker(s) %s left the cluster", brokers)
        for broker_id in brokers:
            self.ctx.live.pop(broker_id, None)
            self.ctx.shutting_down.discard(broker_id)
            if self.channels is not None:
                self.channels.remove_broker(broker_id)
        await self._take_replicas_offline(set(brokers))

    async def _take_replicas_offline(self, gone: set[int]) -> None:
        """Partitions led by ``gone`` get a new leader; ``gone`` leaves every ISR (leader epoch +1);
        the last ISR member stays in the ISR with no leader, as Kafka keeps it."""
        changes: dict[TopicPartition, zk.PartitionState] = {}
        for tp, state in sorted(self.ctx.states.items()):
            if tp[0] in self.ctx.deleting or not (gone & set(self.ctx.replicas(tp))):
                continue
            if state.leader in gone:
                unclean = await self._unclean_allowed(tp[0]) if not any(
                    r in self.ctx.live and r not in self.ctx.shutting_down for r in state.isr) else False
                new = self._offline_leader(tp, unclean)
                if new is None:
                    isr = [r for r in state.isr if r not in gone] or state.isr
                    new = zk.PartitionState(NO_LEADER, state.leader_epoch + 1, isr, self.ctx.epoch, False,
                                            state.zk_version)
                changes[tp] = new
            elif gone & set(state.isr):
                isr = [r for r in state.isr if r not in gone]
                changes[tp] = zk.PartitionState(state.leader, state.leader_epoch + 1, isr, self.ctx.epoch,
                                                state.recovering, state.zk_version)
        written = await self._write_states(changes) if changes else []
        self._publish(written)
        if not written:  # nothing changed: tell everyone who is live anyway
            self._send_update_metadata(self.ctx.live, [])

    async def _on_broker_startup(self, brokers: list[int]) -> None:
        log.info("controller: broker(s) %s joined the cluster", brokers)
        others = [b for b in self.ctx.live if b not in brokers]
        self._send_update_metadata(others, [])
        self._send_update_metadata(brokers, self.ctx.partitions())
        for broker_id in brokers:
            self._send_leader_and_isr(broker_id, self.ctx.partitions_on(broker_id))
        await self._elect_offline_partitions()
        await self._resume_deletions()

    async def _on_topics(self, children: list[str]) -> None:
        if not self.active:
            return
        new = [t for t in children if t not in self.ctx.assignments]
        for topic in set(self.ctx.assignments) - set(children):
            self._forget_topic(topic)
        for topic in new:
            await self._load_topic(topic)
        fresh = [tp for topic in new for tp in self.ctx.partitions() if tp[0] == topic and tp not in self.ctx.states]
        if fresh:
            await self._new_partitions(fresh)
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
            await self._new_partitions([(topic, p) for p in sorted(added)])

    def _forget_topic(self, topic: str) -> None:
        assignment = self.ctx.assignments.pop(topic, None)
        if assignment is not None:
            for partition in assignment.partitions:
                self.ctx.states.pop((topic, partition), None)

    # --- topic deletion (Kafka's TopicDeletionManager) ---------------------------------------------
    async def _on_deletions(self, children: list[str]) -> None:
        """``children`` is what the watch saw when it fired: events queue, so some of its markers may
        be gone by now (a deletion completed meanwhile). Each topic is handled on its own: one that
        fails is logged and the others go on."""
        if not self.active:
            return
        for topic in children:
            try:
                await self._on_deletion(topic)
            except (ControllerMoved, ZookeeperError):
                raise  # the controller cannot act any more: _run_events resigns or waits for the session
            except Exception:
                log.exception("controller: marking %s for deletion failed", topic)
        await self._resume_deletions()

    async def _on_deletion(self, topic: str) -> None:
        if topic not in self.ctx.assignments or not self.settings.delete_topic_enable:
            if not self.settings.delete_topic_enable:
                log.info("controller: delete.topic.enable is false; not deleting %s", topic)
            await self._delete_marker(topic)
        else:
            self.ctx.deleting.add(topic)

    async def _delete_marker(self, topic: str) -> None:
        """Drop /admin/delete_topics/<topic>; one already gone is fine (Kafka's deleteTopicDeletions
        deletes at any version and ignores NONODE)."""
        try:
            await self._fenced([Op("delete", zk.delete_topic_path(topic))])
        except MultiOpError as exc:
            if not isinstance(exc.error, NoNodeError):
                raise

    async def _resume_deletions(self) -> None:
        for topic in sorted(self.ctx.deleting):
            if topic not in self.ctx.assignments:
                continue
            partitions = [tp for tp in self.ctx.partitions() if tp[0] == topic]
            replicas = {r for tp in partitions for r in self.ctx.replicas(tp)}
            if not replicas <= set(self.ctx.live):
                log.info("controller: deleting %s waits for broker(s) %s", topic, sorted(replicas - set(self.ctx.live)))
                continue
            self._start_deletion(topic, partitions, replicas)

    def _start_deletion(self, topic: str, partitions: list[TopicPartition], replicas: set[int]) -> None:
        """UpdateMetadata with leader -2 to all (brokers stop serving it), StopReplica(delete) to
        each replica; once every replica has answered, the znodes go."""
        self._send_update_metadata(self.ctx.live, [], deleting=partitions)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        remaining = set(replicas)

        def answered(broker_id: int) -> Callable[[object], None]:
            def on_response(_response: object) -> None:
                remaining.discard(broker_id)
                if not remaining and not done.done():
                    done.set_result(None)
            return on_response
        for broker_id in sorted(replicas):
            tps = [tp for tp in partitions if broker_id in self.ctx.replicas(tp)]
            self._send_stop_replica(broker_id, tps, delete=True, on_done=answered(broker_id))
        if not replicas:
            done.set_result(None)
        # Waited for on its own task: the controller's events go on meanwhile.
        asyncio.ensure_future(self._finish_deletion(topic, done))

    async def _finish_deletion(self, topic: str, done: asyncio.Future[None]) -> None:
        await done
        self._enqueue(lambda: self._complete_deletion(topic))

    async def _complete_deletion(self, topic: str) -> None:
        if not self.active or topic not in self.ctx.deleting:
            return
        await self.zk.delete(zk.topic_path(topic), recursive=True)
        await self.zk.delete(zk.config_path("topics", topic))
        await self._delete_marker(topic)
        self._forget_topic(topic)
        self.ctx.deleting.discard(topic)
        log.info("controller: deleted topic %s", topic)

    # --- ISR changes from leaders (Kafka's tryProcessAlterPartition) ------------------------------
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
        result: asyncio.Future[tuple[ErrorCode, list[IsrResult]]] = asyncio.get_running_loop().create_future()

        async def event() -> None:
            try:
                result.set_result(await self._alter_partition(broker_id, broker_epoch, changes))
            except ZookeeperError as exc:  # the session broke under us: not the controller now
                log.warning("controller: ZooKeeper failed during a request: %r", exc)
                result.set_result((ErrorCode.NOT_CONTROLLER, []))
            except BaseException as exc:
                result.set_exception(exc)
                raise
        self._enqueue(event)
        return await result

    async def _alter_partition(self, broker_id: int, broker_epoch: int,
                               changes: list[IsrChange]) -> tuple[ErrorCode, list[IsrResult]]:
        if not self.active:
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
        written = set(await self._write_states(accepted)) if accepted else set()
        for n, res in enumerate(results):
            tp = (res.change.topic, res.change.partition)
            if tp in accepted:
                results[n] = (IsrResult(res.change, ErrorCode.NONE, self.ctx.states[tp]) if tp in written
                              else IsrResult(res.change, ErrorCode.INVALID_UPDATE_VERSION))
        if written:
            # No LeaderAndIsr for a leader's own ISR change: UpdateMetadata tells everyone.
            self._send_update_metadata(self.ctx.live, sorted(written))
            for tp in sorted(written):
                if tp in self._targets:
                    await self._maybe_complete_reassignment(tp)
        return ErrorCode.NONE, results

    # --- partition reassignment (KIP-455, Kafka's onPartitionReassignment) -------------------------
    async def reassign(self, targets: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """Start (a replica list) or cancel (None) reassignments, as a controller event."""
        result: asyncio.Future[dict[TopicPartition, tuple[ErrorCode, str | None]]] = (
            asyncio.get_running_loop().create_future())

        async def event() -> None:
            try:
                result.set_result(await self._reassign(targets))
            except ZookeeperError:
                result.set_result({tp: (ErrorCode.NOT_CONTROLLER, None) for tp in targets})
            except BaseException as exc:
                result.set_exception(exc)
                raise
        self._enqueue(event)
        return await result

    def reassignments(self) -> dict[TopicPartition, tuple[list[int], list[int], list[int]]]:
        """Ongoing reassignments: (replicas, adding, removing) per partition."""
        found = {}
        for topic, assignment in self.ctx.assignments.items():
            for index in set(assignment.adding) | set(assignment.removing):
                found[(topic, index)] = (list(assignment.partitions.get(index, [])),
                                         list(assignment.adding.get(index, [])), list(assignment.removing.get(index, [])))
        return found

    async def _reassign(self, targets: dict[TopicPartition, list[int] | None]) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        if not self.active:
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
            self._targets[tp] = list(target)
            outcome[tp] = (ErrorCode.NONE, None)
            started.append(tp)
        for topic in {tp[0] for tp in started}:
            await self._write_assignment(topic)
        if started:
            # Every replica, old and new, learns the new replica set (leader epoch +1); the new ones
            # start following and catching up.
            changes = {tp: self._bumped(tp) for tp in started if tp in self.ctx.states}
            self._publish(await self._write_states(changes))
            for tp in started:
                await self._maybe_complete_reassignment(tp)
        return outcome

    def _bumped(self, tp: TopicPartition) -> zk.PartitionState:
        state = self.ctx.states[tp]
        return zk.PartitionState(state.leader, state.leader_epoch + 1, list(state.isr), self.ctx.epoch,
                                 state.recovering, state.zk_version)

    async def _write_assignment(self, topic: str) -> None:
        found = await self.zk.get(zk.topic_path(topic))
        if found is not None:
            await self._fenced([Op("set", zk.topic_path(topic), zk.encode_topic(self.ctx.assignments[topic]),
                                   found[1].version)])

    async def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        """Once every target replica is in the ISR: the target becomes the replica set, leadership
        moves into it if needed (leader epoch +1 either way), the replicas left out are deleted."""
        target = self._targets.get(tp)
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
        del self._targets[tp]
        await self._write_assignment(tp[0])
        new = zk.PartitionState(leader, state.leader_epoch + 1, isr, self.ctx.epoch, state.recovering, state.zk_version)
        self._publish(await self._write_states({tp: new}))
        for broker_id in removed:
            self._send_stop_replica(broker_id, [tp], delete=True)
        log.info("controller: reassignment of %s-%d done: replicas %s", tp[0], tp[1], target)

    # --- ElectLeaders and auto-rebalance (Kafka's processReplicaLeaderElection) ------------------
    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        """PREFERRED: move leadership to the first assigned replica if it is live and in the ISR;
        UNCLEAN: give a partition without a live leader the first live replica. ``None`` means every
        partition, answered only for those elected. Runs as a controller event."""
        result: asyncio.Future[dict[TopicPartition, ErrorCode]] = asyncio.get_running_loop().create_future()

        async def event() -> None:
            try:
                result.set_result(await self._elect_leaders(preferred, partitions))
            except ZookeeperError:
                result.set_result({tp: ErrorCode.NOT_CONTROLLER for tp in partitions or []})
            except BaseException as exc:
                result.set_exception(exc)
                raise
        self._enqueue(event)
        return await result

    async def _elect_leaders(self, preferred: bool,
                             partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        if not self.active:
            return {tp: ErrorCode.NOT_CONTROLLER for tp in partitions or []}
        wanted = partitions if partitions is not None else [
            tp for tp, s in sorted(self.ctx.states.items())
            if tp[0] not in self.ctx.deleting and self.ctx.replicas(tp) and (
                s.leader != self.ctx.replicas(tp)[0] if preferred else s.leader not in self.ctx.live)]
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
                elif first not in self.ctx.live or first not in state.isr or first in self.ctx.shutting_down:
                    outcome[tp] = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
                else:
                    changes[tp] = zk.PartitionState(first, state.leader_epoch + 1, list(state.isr), self.ctx.epoch,
                                                    state.recovering, state.zk_version)
            elif state.leader in self.ctx.live:
                outcome[tp] = ErrorCode.ELECTION_NOT_NEEDED
            else:
                new = self._offline_leader(tp, unclean=True)
                if new is None:
                    outcome[tp] = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
                else:
                    changes[tp] = new
        written = await self._write_states(changes) if changes else []
        self._publish(written)
        for tp in changes:
            outcome[tp] = ErrorCode.NONE if tp in written else ErrorCode.NOT_CONTROLLER
        return outcome

    async def _auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per broker, when more than
        leader.imbalance.per.broker.percentage of the partitions it is preferred for are led by
        others, hand them back (where it is live and in the ISR)."""
        if not self.active or self.settings.imbalance_percentage < 0:
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
            if astray and len(astray) * 100 / len(tps) > self.settings.imbalance_percentage:
                moves += [tp for tp in astray if broker_id in self.ctx.states[tp].isr]
        if moves:
            log.info("controller: auto-rebalance moves %d partition(s) back to their preferred leaders", len(moves))
            await self._elect_leaders(True, moves)

    def _schedule_rebalance(self) -> None:
        interval = self.settings.imbalance_check_interval_s
        if interval <= 0 or self._stopped:
            return

        def tick() -> None:
            if self.active:
                self._enqueue(self._auto_rebalance)
                self._rebalance_timer = asyncio.get_running_loop().call_later(interval, tick)
        # Kafka's first check comes 5 s after failover, then every interval.
        self._rebalance_timer = asyncio.get_running_loop().call_later(min(5.0, interval), tick)

    # --- controlled shutdown (Kafka's doControlledShutdown) ----------------------------------------
    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        """Move leadership off ``broker_id``; the partitions it still leads. Runs as a controller event."""
        result: asyncio.Future[tuple[ErrorCode, list[TopicPartition]]] = asyncio.get_running_loop().create_future()

        async def event() -> None:
            try:
                result.set_result(await self._controlled_shutdown(broker_id, broker_epoch))
            except ZookeeperError as exc:  # the session broke under us: not the controller now
                log.warning("controller: ZooKeeper failed during a request: %r", exc)
                result.set_result((ErrorCode.NOT_CONTROLLER, []))
            except BaseException as exc:
                result.set_exception(exc)
                raise
        self._enqueue(event)
        return await result

    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> tuple[ErrorCode, list[TopicPartition]]:
        if not self.active:
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
        written = await self._write_states(changes) if changes else []
        self._publish(written)
        self._send_stop_replica(broker_id, [tp for tp in follower_of if tp in written], delete=False)
        # As Kafka: only replicated partitions count (one replica has nowhere to move).
        remaining = [tp for tp, s in sorted(self.ctx.states.items())
                     if s.leader == broker_id and len(self.ctx.replicas(tp)) > 1 and tp[0] not in self.ctx.deleting]
        return ErrorCode.NONE, remaining

