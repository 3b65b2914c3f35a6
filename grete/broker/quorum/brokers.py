"""KRaft brokers as a controller quorum knows them: registration, heartbeats, fencing (Kafka's
ClusterControlManager and BrokerHeartbeatManager).

Every voter keeps the registrations from committed records (RegisterBrokerRecord,
BrokerRegistrationChangeRecord, FenceBrokerRecord, UnfenceBrokerRecord, UnregisterBrokerRecord), so a
new leader knows every broker. Only the leader takes BrokerRegistration and BrokerHeartbeat, and only
it keeps heartbeat times: a broker silent for ``broker.session.timeout.ms`` is fenced by a record.

- A registration writes a RegisterBrokerRecord, fenced; the broker's epoch is the offset its batch
  starts at. A new incarnation's batch first takes it out of every ISR, and out of every eligible
  leader replica set if it did not shut down cleanly (grete/broker/quorum/partitions.py). Another incarnation of an id whose broker is unfenced and still heartbeating is
  DUPLICATE_BROKER_REGISTRATION (a fenced broker has no session, as in Kafka).
- A heartbeat from a registered broker of the current epoch is caught up once the broker has
  replayed the log up to its own registration; a fenced broker that is caught up and does not ask to
  stay fenced is unfenced (BrokerRegistrationChangeRecord, fenced -1), answered once committed.
- A broker asking to shut down is fenced (its leaderships move) and told to shut down.
- With ``grete.fast.failover.enable``, the leader also watches every unfenced broker's process
  (grete/broker/cluster/liveness.py): a broker whose connection ends and whose port then refuses
  connections is dead, not silent, and is fenced at once rather than after the session timeout. A
  paused or unreachable broker leaves no such evidence and waits for the timeout, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from grete.broker.cluster.liveness import ProcessWatch
from grete.coordinator.zookeeper.zk_layout import BrokerInfo, EndPoint
from grete.protocol.codec import ZERO_UUID, Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AssignReplicasToDirsRequest,
    AssignReplicasToDirsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from grete.protocol.metadata import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from grete.storage.files import uuid_to_kafka

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
# Kafka's SecurityProtocol ids, as registrations carry them.
SECURITY_PROTOCOLS = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}
# BrokerRegistrationChangeRecord's Fenced: Kafka's BrokerRegistrationFencingChange.
FENCE, UNFENCE = 1, -1
# Kafka's DirectoryId: a replica whose broker has not said which log dir holds it, and one being
# moved from ZooKeeper mode, both counted online; a replica whose dir is known lost.
UNASSIGNED_DIR, LOST_DIR, MIGRATING_DIR = ZERO_UUID, uuid.UUID(int=1), uuid.UUID(int=2)

Commit = Callable[[Sequence[Message]], Awaitable[None]]


class AlterPartitionTaker(Protocol):
    async def alter_partition(self, request: AlterPartitionRequest, version: int) -> AlterPartitionResponse: ...
    async def broker_unregistered(self, broker_id: int, record: Message) -> None: ...
    async def broker_registered(self, broker_id: int, clean: bool, record: Message) -> None: ...
    async def dirs_offline(self, broker_id: int, dirs: set[uuid.UUID], record: Message) -> None: ...
    async def assign_dirs(self, request: AssignReplicasToDirsRequest, online: Callable[[uuid.UUID], bool]
                          ) -> AssignReplicasToDirsResponse: ...


@dataclass
class Registration:
    broker_id: int
    epoch: int  # the offset of its RegisterBrokerRecord
    incarnation: uuid.UUID
    fenced: bool = True
    in_controlled_shutdown: bool = False
    endpoints: list[tuple[str, str, int, int]] = field(default_factory=list)  # name, host, port, protocol
    rack: str | None = None
    log_dirs: list[uuid.UUID] = field(default_factory=list)  # its log dirs that are online (KIP-858)
    features: list[RegisterBrokerRecord.BrokerFeature] = field(default_factory=list)
    cordoned_dirs: list[uuid.UUID] = field(default_factory=list)  # KIP-1066, from its heartbeats

    def online_dir(self, directory: uuid.UUID) -> bool:
        """Whether a replica assigned to ``directory`` on this broker is in an online log dir
        (Kafka's DirectoryId.isOnline: unassigned counts as online, as does a broker that listed none)."""
        if directory in (UNASSIGNED_DIR, MIGRATING_DIR):
            return True
        return directory != LOST_DIR and (not self.log_dirs or directory in self.log_dirs)

    @property
    def cordoned(self) -> bool:
        """Every log dir cordoned: the controller places no new replica on it."""
        return bool(self.log_dirs) and set(self.log_dirs) <= set(self.cordoned_dirs)

    def record(self) -> RegisterBrokerRecord:
        """The registration as one record (a snapshot's): fencing and shutdown state included."""
        return RegisterBrokerRecord(
            broker_id=self.broker_id, is_migrating_zk_broker=False, incarnation_id=self.incarnation,
            broker_epoch=self.epoch, rack=self.rack, fenced=self.fenced, in_controlled_shutdown=self.in_controlled_shutdown,
            log_dirs=list(self.log_dirs), features=list(self.features),
            cordoned_log_dirs=list(self.cordoned_dirs) if self.cordoned_dirs else None,
            end_points=[RegisterBrokerRecord.BrokerEndpoint(name=name, host=host, port=port, security_protocol=code)
                        for name, host, port, code in self.endpoints])


class Registrations:
    """The brokers' and controllers' registrations as the committed records leave them: what every
    voter keeps, and a KRaft broker too (its image of which brokers are live, where their listeners are)."""

    def __init__(self) -> None:
        self.brokers: dict[int, Registration] = {}
        self.controllers: dict[int, RegisterControllerRecord] = {}

    def reset(self) -> None:
        """Forget them all (a snapshot's records are to replace them)."""
        self.brokers.clear()
        self.controllers.clear()

    def records(self) -> list[Message]:
        """The records that rebuild them (a snapshot's)."""
        return [*(self.brokers[b].record() for b in sorted(self.brokers)),
                *(self.controllers[c] for c in sorted(self.controllers))]

    def apply(self, record: Message, offset: int) -> None:
        if isinstance(record, RegisterBrokerRecord):
            self.brokers[record.broker_id] = Registration(
                record.broker_id, record.broker_epoch, record.incarnation_id, record.fenced,
                record.in_controlled_shutdown,
                [(e.name, e.host, e.port, e.security_protocol) for e in record.end_points], record.rack,
                list(record.log_dirs), list(record.features), list(record.cordoned_log_dirs or []))
        elif isinstance(record, RegisterControllerRecord):
            self.controllers[record.controller_id] = record
        elif isinstance(record, BrokerRegistrationChangeRecord):
            found = self._current(record.broker_id, record.broker_epoch)
            if found is not None and record.fenced:
                found.fenced = record.fenced == FENCE
            if found is not None and record.in_controlled_shutdown:
                found.in_controlled_shutdown = record.in_controlled_shutdown == 1
            if found is not None and record.cordoned_log_dirs is not None:
                found.cordoned_dirs = list(record.cordoned_log_dirs)
            if found is not None and record.log_dirs:  # empty: no change (Kafka's BrokerRegistration.cloneWith)
                found.log_dirs = list(record.log_dirs)
        elif isinstance(record, FenceBrokerRecord | UnfenceBrokerRecord):
            found = self._current(record.id, record.epoch)
            if found is not None:
                found.fenced = isinstance(record, FenceBrokerRecord)
        elif isinstance(record, UnregisterBrokerRecord):
            found = self._current(record.broker_id, record.broker_epoch)
            if found is not None:
                del self.brokers[record.broker_id]

    def _current(self, broker_id: int, epoch: int) -> Registration | None:
        found = self.brokers.get(broker_id)
        return found if found is not None and found.epoch == epoch else None

    def directory_of(self, broker_id: int) -> uuid.UUID:
        """Where the controller places a new replica on ``broker_id``: its log dir if it registered
        exactly one (Kafka's ClusterControlManager.defaultDir), else unassigned."""
        found = self.brokers.get(broker_id)
        return found.log_dirs[0] if found is not None and len(found.log_dirs) == 1 else ZERO_UUID

    def replica_offline(self, broker_id: int, directory: uuid.UUID | None, listener: str | None = None) -> bool:
        """A replica on ``broker_id`` that Metadata lists as offline (Kafka's KRaftMetadataCache):
        its broker unregistered or fenced, without ``listener``, or its log dir offline."""
        found = self.brokers.get(broker_id)
        if found is None or found.fenced:
            return True
        if listener is not None and not any(name == listener for name, *_ in found.endpoints):
            return True
        return directory is not None and not found.online_dir(directory)

    def live(self) -> list[BrokerInfo]:
        """The unfenced brokers, where partitions are placed first (Kafka's usable brokers)."""
        return [info for info, fenced in self._infos() if not fenced]

    def registered(self) -> list[BrokerInfo]:
        """Every registered broker, fenced ones included: where a partition's followers may be
        placed when too few are unfenced (Kafka's StripedReplicaPlacer)."""
        return [info for info, _fenced in self._infos()]

    def active(self, broker_id: int) -> bool:
        """Registered, unfenced and not shutting down: a new partition's ISR member (Kafka's isActive)."""
        found = self.brokers.get(broker_id)
        return found is not None and not found.fenced and not found.in_controlled_shutdown

    def _infos(self) -> list[tuple[BrokerInfo, bool]]:
        return [(BrokerInfo(r.broker_id, tuple(EndPoint(name, host, port, SECURITY_PROTOCOLS.get(code, "PLAINTEXT"))
                                               for name, host, port, code in r.endpoints), r.rack, r.epoch,
                            cordoned=r.cordoned), r.fenced)
                for r in sorted(self.brokers.values(), key=lambda r: r.broker_id)]


class BrokerRegistry(Registrations):
    """The registrations, and the active controller's part: registration, heartbeats, fencing."""

    def __init__(self, cluster_id: str, session_timeout_ms: int, commit: Commit,
                 next_offset: Callable[[], int], leads: Callable[[], bool],
                 next_producer_id: Callable[[], int], fast_failover: bool = False) -> None:
        super().__init__()
        self.cluster_id = cluster_id
        self.fast_failover = fast_failover
        self.session_timeout_ms = session_timeout_ms
        self._commit = commit
        self._next_offset = next_offset  # where the next appended record lands (the leader's log end)
        self._leads = leads
        self.next_producer_id = next_producer_id  # the first id of the next block (from the records)
        self._allocating = asyncio.Lock()
        # Told the id of a broker once its fencing is committed (its partitions' leaders move), and
        # once its unfencing is (leaderless partitions it can lead get it as leader).
        self.fenced_listeners: list[Callable[[int], Awaitable[None]]] = []
        self.unfenced_listeners: list[Callable[[int], Awaitable[None]]] = []
        # The partition control (AlterPartition), set by the node; grete/broker/quorum/partitions.py.
        self.partitions: AlterPartitionTaker | None = None
        self._last_heartbeat: dict[int, float] = {}  # monotonic seconds, the leader's only
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._watches: dict[int, tuple[int, ProcessWatch]] = {}  # broker id -> (epoch, watch), the leader's
        self._dirs_going: dict[int, set[uuid.UUID]] = {}  # log dirs being recorded offline, by broker

    # --- requests (the leader) -----------------------------------------------------------------
    async def register(self, request: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
        try:
            return await self._register(request)
        except KafkaError as exc:  # the leadership lost while writing: the broker asks the next one
            return BrokerRegistrationResponse(error_code=exc.code, broker_epoch=-1)

    async def _register(self, request: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
        def refused(error: ErrorCode) -> BrokerRegistrationResponse:
            return BrokerRegistrationResponse(error_code=error, broker_epoch=-1)
        if not self._leads():
            return refused(ErrorCode.NOT_CONTROLLER)
        if request.cluster_id != self.cluster_id:
            return refused(ErrorCode.INCONSISTENT_CLUSTER_ID)
        existing = self.brokers.get(request.broker_id)
        # A fenced broker has no session (Kafka's BrokerHeartbeatManager.hasValidSession): a broker
        # restarted after its process was seen dead registers at once, not a session timeout later.
        if (existing is not None and existing.incarnation != request.incarnation_id and not existing.fenced
                and self._alive(request.broker_id)):
            return refused(ErrorCode.DUPLICATE_BROKER_REGISTRATION)
        epoch = self._next_offset()
        record = RegisterBrokerRecord(
            broker_id=request.broker_id, is_migrating_zk_broker=False, incarnation_id=request.incarnation_id,
            broker_epoch=epoch, rack=request.rack, fenced=True, in_controlled_shutdown=False,
            log_dirs=list(request.log_dirs),
            end_points=[RegisterBrokerRecord.BrokerEndpoint(name=lst.name, host=lst.host, port=lst.port,
                                                            security_protocol=lst.security_protocol)
                        for lst in request.listeners],
            features=[RegisterBrokerRecord.BrokerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                                         max_supported_version=f.max_supported_version)
                      for f in request.features])
        if self.partitions is not None and (existing is None or existing.incarnation != request.incarnation_id):
            # A new incarnation: its last one ended cleanly if it names the epoch it had then.
            clean = existing is not None and existing.epoch == request.previous_broker_epoch
            await self.partitions.broker_registered(request.broker_id, clean, record)
        else:
            await self._commit([record])
        self._heard(request.broker_id)
        log.info("broker %d registered (epoch %d, incarnation %s)", request.broker_id, epoch, request.incarnation_id)
        return BrokerRegistrationResponse(error_code=ErrorCode.NONE, broker_epoch=epoch)

    async def heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        try:
            return await self._heartbeat(request)
        except KafkaError as exc:  # the leadership lost while writing: the broker asks the next one
            return BrokerHeartbeatResponse(error_code=exc.code, is_fenced=True)

    async def allocate_producer_ids(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
        """A block of producer ids for a registered broker of the current epoch (Kafka's
        ProducerIdControlManager): a ProducerIdsRecord holding the next free id, one at a time."""
        def refused(error: ErrorCode) -> AllocateProducerIdsResponse:
            return AllocateProducerIdsResponse(error_code=error, producer_id_start=-1, producer_id_len=-1)
        error, _found = self._standing(request.broker_id, request.broker_epoch)
        if error is not ErrorCode.NONE:
            return refused(error)
        async with self._allocating:  # the next block is read after the previous one is applied
            first = self.next_producer_id()
            try:
                await self._commit([ProducerIdsRecord(broker_id=request.broker_id, broker_epoch=request.broker_epoch,
                                                      next_producer_id=first + PRODUCER_ID_BLOCK)])
            except KafkaError as exc:
                return refused(exc.code)
        return AllocateProducerIdsResponse(error_code=ErrorCode.NONE, producer_id_start=first,
                                           producer_id_len=PRODUCER_ID_BLOCK)

    async def _heartbeat(self, request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        def answer(error: ErrorCode, found: Registration | None = None, caught_up: bool = False,
                   shut_down: bool = False) -> BrokerHeartbeatResponse:
            return BrokerHeartbeatResponse(error_code=error, is_caught_up=caught_up,
                                           is_fenced=found.fenced if found is not None else True,
                                           should_shut_down=shut_down)
        error, found = self._standing(request.broker_id, request.broker_epoch)
        if found is None:
            return answer(error)
        self._heard(request.broker_id)
        caught_up = request.current_metadata_offset >= found.epoch
        await self._dirs_offline(found, request.offline_log_dirs)
        cordoned = request.cordoned_log_dirs
        if cordoned is not None and sorted(cordoned) != sorted(found.cordoned_dirs):  # v2 (KIP-1066)
            await self._commit([BrokerRegistrationChangeRecord(broker_id=found.broker_id, broker_epoch=found.epoch,
                                                               cordoned_log_dirs=list(cordoned))])
        if request.want_shut_down:
            if not found.fenced:
                await self._fence(found)
            return answer(ErrorCode.NONE, found, caught_up, shut_down=True)
        if found.fenced and caught_up and not request.want_fence:
            await self._commit([BrokerRegistrationChangeRecord(broker_id=found.broker_id, broker_epoch=found.epoch,
                                                               fenced=UNFENCE)])
            log.info("broker %d unfenced (epoch %d)", found.broker_id, found.epoch)
            self._watch(found)
            for listener in self.unfenced_listeners:
                await listener(found.broker_id)
        elif not found.fenced and request.want_fence:
            await self._fence(found)
        return answer(ErrorCode.NONE, self.brokers.get(found.broker_id), caught_up)

    async def _dirs_offline(self, found: Registration, offline: list[uuid.UUID]) -> None:
        """Log dirs a heartbeat reports failed (KIP-858, Kafka's handleDirectoriesOffline): the
        broker's replicas in them leave their ISRs and leaderships, and its registration keeps only
        the dirs still online, in one batch."""
        taking = self._dirs_going.setdefault(found.broker_id, set())
        failed = {d for d in offline if d in found.log_dirs and d not in taking}
        if not failed:
            return
        online = [d for d in found.log_dirs if d not in failed]
        record = BrokerRegistrationChangeRecord(broker_id=found.broker_id, broker_epoch=found.epoch, log_dirs=online)
        log.warning("Directories [%s] in broker %d marked offline, remaining directories: [%s]",
                    ", ".join(uuid_to_kafka(d) for d in sorted(failed)), found.broker_id,
                    ", ".join(uuid_to_kafka(d) for d in online))
        taking |= failed  # a heartbeat meanwhile (before the record is applied) does not repeat it
        try:
            if self.partitions is not None:
                await self.partitions.dirs_offline(found.broker_id, failed, record)
            else:
                await self._commit([record])
        finally:
            taking -= failed

    async def assign_dirs(self, request: AssignReplicasToDirsRequest) -> AssignReplicasToDirsResponse:
        """AssignReplicasToDirs (KIP-858): which log dir holds each of a broker's replicas, as the
        broker placed them (Kafka's handleAssignReplicasToDirs)."""
        error, found = self._standing(request.broker_id, request.broker_epoch)
        if found is None:
            return AssignReplicasToDirsResponse(error_code=error)
        assert self.partitions is not None
        try:
            return await self.partitions.assign_dirs(request, found.online_dir)
        except KafkaError as exc:  # the leadership lost while writing
            return AssignReplicasToDirsResponse(error_code=exc.code)

    def _standing(self, broker_id: int, epoch: int) -> tuple[ErrorCode, Registration | None]:
        """A broker's request to the active controller: its registration, or why it is refused
        (NOT_CONTROLLER, BROKER_ID_NOT_REGISTERED, STALE_BROKER_EPOCH), as Kafka's checkBrokerEpoch."""
        if not self._leads():
            return ErrorCode.NOT_CONTROLLER, None
        found = self.brokers.get(broker_id)
        if found is None:
            return ErrorCode.BROKER_ID_NOT_REGISTERED, None
        if found.epoch != epoch:
            return ErrorCode.STALE_BROKER_EPOCH, None
        return ErrorCode.NONE, found

    # --- sessions (the leader) -------------------------------------------------------------------
    def _alive(self, broker_id: int) -> bool:
        heard = self._last_heartbeat.get(broker_id)
        return heard is not None and time.monotonic() - heard < self.session_timeout_ms / 1000

    def _heard(self, broker_id: int) -> None:
        self._last_heartbeat[broker_id] = time.monotonic()
        timer = self._timers.pop(broker_id, None)
        if timer is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self._timers[broker_id] = loop.call_later(self.session_timeout_ms / 1000, self._expired, broker_id)

    def _watch(self, found: Registration) -> None:
        """The leader's watch of an unfenced broker's process (one per registration)."""
        current = self._watches.get(found.broker_id)
        if not self.fast_failover or not found.endpoints or (current is not None and current[0] == found.epoch):
            return
        if current is not None:
            current[1].close()
        _name, host, port, _protocol = found.endpoints[0]
        self._watches[found.broker_id] = (found.epoch, ProcessWatch(
            host, port, lambda: self._dead(found.broker_id, found.epoch), lambda: None))

    def _dead(self, broker_id: int, epoch: int) -> None:
        """The broker's process is gone: fenced now if this registration still stands unfenced."""
        found = self._current(broker_id, epoch)
        if found is not None and not found.fenced and self._leads():
            log.info("broker %d: its connection ended and its port refuses connections: fencing it now", broker_id)
            asyncio.ensure_future(self._fence_quietly(found))

    def _unwatch_all(self) -> None:
        for _epoch, watch in self._watches.values():
            watch.close()
        self._watches.clear()

    def _expired(self, broker_id: int) -> None:
        self._timers.pop(broker_id, None)
        found = self.brokers.get(broker_id)
        if found is not None and not found.fenced and self._leads():
            log.info("broker %d: no heartbeat for broker.session.timeout.ms=%d: fencing it", broker_id,
                     self.session_timeout_ms)
            asyncio.ensure_future(self._fence_quietly(found))

    async def _fence_quietly(self, found: Registration) -> None:
        try:
            await self._fence(found)
        except KafkaError as exc:  # a leadership lost on the way: the next leader fences
            log.warning("broker %d not fenced: %s", found.broker_id, exc)

    async def _fence(self, found: Registration) -> None:
        await self._commit([BrokerRegistrationChangeRecord(broker_id=found.broker_id, broker_epoch=found.epoch,
                                                           fenced=FENCE)])
        log.info("broker %d fenced (epoch %d)", found.broker_id, found.epoch)
        for listener in self.fenced_listeners:
            await listener(found.broker_id)

    async def unregister(self, broker_id: int) -> None:
        """UnregisterBroker (Kafka's ReplicationControlManager.unregisterBroker): the broker leaves
        every ISR and leadership and its registration goes, in one batch; a broker still running
        registers again at its next heartbeat (BROKER_ID_NOT_REGISTERED there)."""
        if not self._leads():
            raise KafkaError(ErrorCode.NOT_CONTROLLER, "this node does not lead the metadata quorum")
        found = self.brokers.get(broker_id)
        if found is None:
            raise KafkaError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker ID {broker_id} is not currently registered")
        assert self.partitions is not None
        await self.partitions.broker_unregistered(broker_id, UnregisterBrokerRecord(broker_id=broker_id,
                                                                                   broker_epoch=found.epoch))
        log.info("broker %d unregistered (epoch %d)", broker_id, found.epoch)
        timer = self._timers.pop(broker_id, None)
        if timer is not None:
            timer.cancel()
        watch = self._watches.pop(broker_id, None)
        if watch is not None:
            watch[1].close()

    def leadership_changed(self, leads: bool) -> None:
        """A new leader counts every unfenced broker as heard from now (Kafka's active controller
        does the same), so none is fenced for the time the election took; a voter that no longer
        leads forgets its heartbeat times."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._last_heartbeat.clear()
        self._unwatch_all()
        if leads:
            for registration in self.brokers.values():
                if not registration.fenced:
                    self._heard(registration.broker_id)
                    self._watch(registration)
