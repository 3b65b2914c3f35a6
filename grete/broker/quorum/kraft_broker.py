"""A broker of a KRaft cluster (``process.roles=broker``), as Kafka 4.3's BrokerServer runs one.

It is not a voter: it follows ``__cluster_metadata`` as an observer of the controller quorum named by
``controller.quorum.voters`` (the Raft driver of grete/broker/quorum/driver.py, fetching from the
quorum's leader), and its metadata is the image replayed from the committed records
(grete/broker/quorum/broker_store.py). What the image says of this broker's partitions is acted on
as it arrives, with no LeaderAndIsr or UpdateMetadata: a partition whose leader epoch moved is led or
followed, one whose partition epoch moved under the same leader takes its new ISR, one removed or
moved away is deleted here (Kafka's ReplicaManager.applyDelta). The broker registers and heartbeats
(grete/broker/quorum/broker_lifecycle.py), sends its ISR changes to the active controller
(AlterPartition) and its metadata changes there too (the store). It is also the broker's cluster
view: the live brokers are the registered, unfenced ones, as Kafka's KRaft metadata cache lists them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import TYPE_CHECKING

from grete.broker.cluster.alter_partition import AlterPartitionManager
from grete.broker.cluster.fetcher import ReplicaFetcherManager, replication_quota
from grete.broker.cluster.requests import PROTOCOL_IDS
from grete.broker.cluster.share_persister import ClusterSharePersister
from grete.broker.cluster_view import BrokersFromMetadata, Reassignment, TopicPartition
from grete.broker.config import BrokerConfig, StartupError
from grete.broker.network.listeners import inter_broker_listener, security_protocol
from grete.broker.quorum.addresses import VoterAddress
from grete.broker.quorum.broker_lifecycle import BrokerLifecycle, Registration
from grete.broker.quorum.broker_store import BrokerMetadataStore
from grete.broker.quorum.brokers import Registrations
from grete.broker.quorum.controller_channel import ControllerChannel, QuorumLeader
from grete.broker.quorum.controller_node import (
    formatted_cluster_id,
    formatted_storage,
    metadata_log_config,
    quorum_of,
    raft_config,
    snapshot_policy,
)
from grete.broker.quorum.dir_assignments import DirAssignments
from grete.broker.quorum.driver import RaftDriver
from grete.broker.quorum.image_changes import ImageChanges
from grete.broker.quorum.kraft_version import BrokerKRaftVersion
from grete.broker.quorum.registration_manager import supported_features
from grete.broker.quorum.snapshot_image import load_snapshot, snapshot_records
from grete.broker.replica.replica_manager import PartitionOrder
from grete.coordinator.kraft.quorum import METADATA_PARTITION_DIR
from grete.coordinator.kraft.raft_log import RaftBatch
from grete.coordinator.kraft.voters import VoterNode
from grete.coordinator.metadata import TopicMeta
from grete.coordinator.zookeeper.zk_layout import BrokerInfo, EndPoint
from grete.protocol.codec import ZERO_UUID, Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import BrokerRegistrationRequest, ElectLeadersRequest, ElectLeadersResponse
from grete.protocol.metadata import PartitionChangeRecord, PartitionRecord, RemoveTopicRecord, TopicRecord

if TYPE_CHECKING:
    from grete.broker.broker import Broker

log = logging.getLogger(__name__)

CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0
ELECT_LEADERS_VERSION = 2
REASSIGNMENTS_FORWARDED = "reassignments are the active controller's: the request is forwarded to it whole"


class KRaftBroker(BrokersFromMetadata):
    zk_broker_apis = False
    replicates = True
    # Kafka 4's AutoTopicCreationManager: the topic is asked of the controller, the answer is
    # UNKNOWN_TOPIC_OR_PARTITION until this broker's image has it (clients retry).
    auto_create_error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    auto_create_waits_open = False
    sweeps_tokens = False  # the active controller removes expired tokens (Kafka 4's QuorumController)
    forwards_voter_changes = True
    def __init__(self, config: BrokerConfig, voter: RaftDriver | None = None) -> None:
        """``voter``: a combined node's own Raft voter, whose committed batches feed this broker's
        image (Kafka's combined node shares its RaftManager); without it the broker is an observer."""
        self.config = config
        self.broker_id = config.node_id
        meta = formatted_storage(config, "broker")
        self.cluster_id = formatted_cluster_id(config, "broker")
        self.voters, bootstrap = quorum_of(config)
        if voter is None and self.broker_id in self.voters:  # Kafka's KafkaConfig refuses it too, in these words
            raise StartupError(f"If process.roles contains just the 'broker' role, the node id {self.broker_id} must "
                               f"not be included in the set of voters controller.quorum.voters="
                               f"{{{', '.join(str(v) for v in sorted(self.voters))}}}")
        names = config.get_list("controller.listener.names")
        if not names:
            raise StartupError("process.roles=broker needs controller.listener.names (the controllers' listener)")
        self.controller_listener = names[0]
        self.listener = inter_broker_listener(config)
        self._observer = voter is None  # the driver is this broker's own, started and closed by it
        if voter is None:
            self.driver = RaftDriver(self.broker_id, self.voters, config.metadata_log_dir / METADATA_PARTITION_DIR,
                                     self.cluster_id, raft_config(config), self._committed,
                                     listener=self.controller_listener, bootstrap=bootstrap,
                                     local=VoterNode(self.broker_id, meta.directory_id or ZERO_UUID),
                                     snapshots=snapshot_policy(config), log_config=metadata_log_config(config))
        else:  # the combined node's controller snapshots the log
            self.driver = voter
            voter.commit_listeners.append(self._committed)
        self.driver.snapshot_listeners.append(self._loaded)
        request_timeout_s = config.get_int("controller.quorum.request.timeout.ms") / 1000
        self.channel = ControllerChannel(self.broker_id, QuorumLeader(self.driver),
                                         timeout_s=max(30.0, request_timeout_s))
        self.lifecycle: BrokerLifecycle | None = None
        self._heartbeats: ControllerChannel | None = None
        self.metadata = BrokerMetadataStore(self.cluster_id, self.channel, lambda: self.broker_epoch)
        self.kraft_version = BrokerKRaftVersion(self.driver, self.metadata)
        self._changes = ImageChanges(self.metadata.changes, self.metadata.topic_by_id, self.metadata.topic)
        self.registry = Registrations()  # the brokers' registrations, from the log
        if self._observer:
            self.driver.snapshot_source = lambda: snapshot_records(self.metadata, self.registry)
        self.applied_offset = -1
        self._caught_up = asyncio.Event()  # the image holds this broker's own registration
        self._listed = asyncio.Event()  # ... and, after it, this broker unfenced: it serves from then
        self.alter_partitions: AlterPartitionManager | None = None
        self.dir_assignments: DirAssignments | None = None
        self._broker: Broker | None = None
        self._touched: set[uuid.UUID] = set()  # topics whose partitions changed since the last delta
        self._removed: set[uuid.UUID] = set()
        self._delta_due = False
        # What this broker acts on per hosted partition: (leader epoch, partition epoch), by topic id.
        self._hosted: dict[uuid.UUID, dict[int, tuple[int, int]]] = {}
        self._names: dict[uuid.UUID, str] = {}

    @property
    def broker_epoch(self) -> int:
        return self.lifecycle.broker_epoch if self.lifecycle is not None else -1

    # --- the cluster view ---------------------------------------------------------------------------
    def live_brokers(self) -> list[BrokerInfo]:
        return self.registry.live()

    def registered_brokers(self) -> list[BrokerInfo]:
        return self.registry.registered()

    def known_topic(self, name: str) -> TopicMeta | None:
        return self.metadata.topic(name)

    def controller_id(self) -> int:
        """A KRaft broker does not expose the controllers: Kafka's brokers name a live broker."""
        live = [b.id for b in self.live_brokers()]
        return self.broker_id if self.broker_id in live else (live[0] if live else -1)

    def controller_listeners(self) -> list[str]:
        return []

    def offline_replicas(self, meta: TopicMeta, index: int, listener: str) -> list[int]:
        """As Kafka's KRaft metadata cache: replicas whose broker is fenced or gone, lacks the
        listener, or has the replica's log dir offline."""
        pmeta = meta.partitions[index]
        return [r for r in pmeta.replicas if self.registry.replica_offline(r, pmeta.directory(r), listener)]

    def check_broker_configs(self, scope: str, before: dict[str, str], after: dict[str, str]) -> None:
        """The controller checks what it is sent (eligible leader replicas' rules included)."""

    async def elect_leaders(self, preferred: bool,
                            partitions: list[TopicPartition] | None) -> dict[TopicPartition, ErrorCode]:
        """Asked of the active controller, as Kafka's brokers forward ElectLeaders."""
        topics: dict[str, list[int]] = {}
        for topic, index in partitions or []:
            topics.setdefault(topic, []).append(index)
        request = ElectLeadersRequest(
            election_type=0 if preferred else 1, timeout_ms=30000,
            topic_partitions=None if partitions is None else [
                ElectLeadersRequest.TopicPartitions(topic=t, partitions=sorted(p)) for t, p in sorted(topics.items())])
        response = await self.channel.call(request, ELECT_LEADERS_VERSION)
        assert isinstance(response, ElectLeadersResponse)
        if response.error_code != ErrorCode.NONE:
            raise KafkaError(ErrorCode(response.error_code), "the controller refused the election")
        return {(r.topic, p.partition_id): ErrorCode(p.error_code)
                for r in response.replica_election_results for p in r.partition_result}

    async def forwarded(self, request: Message, version: int) -> Message | None:
        """Asked of the active controller as it came, as Kafka's brokers forward DescribeQuorum,
        AlterPartitionReassignments and ListPartitionReassignments: the controller records the
        reassignment, this broker acts on the records (new replicas follow, removed ones are deleted)."""
        return await self.channel.call(request, version)

    def reassignments(self) -> dict[TopicPartition, Reassignment]:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, REASSIGNMENTS_FORWARDED)

    async def reassign(self, wanted: dict[TopicPartition, list[int] | None]
                       ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        raise KafkaError(ErrorCode.NOT_CONTROLLER, REASSIGNMENTS_FORWARDED)

    # --- start (the node's order) -----------------------------------------------------------------------
    async def connect(self) -> str:
        return self.cluster_id

    def serve_replication(self, broker: Broker) -> None:
        """Followers fetch from their leaders; leaders send their ISR changes to the active controller."""
        self._broker = broker
        fetchers = ReplicaFetcherManager(self.broker_id, self.config, broker.metrics,
                                         lambda: broker.direct.push_receiver() if broker.direct is not None else None,
                                         replication_quota(self.broker_id, broker, "follower"))
        self.alter_partitions = AlterPartitionManager(self.broker_id, lambda: self.broker_epoch,
                                                      self._controller_info, self.controller_listener)
        broker.replicas.followers = fetchers
        broker.replicas.leader_quota = replication_quota(self.broker_id, broker, "leader")
        submit = self.alter_partitions.submit
        # Kafka 4's leader proposes its ISR out of a hash set: ascending, for the ids brokers have.
        broker.replicas.alter_isr = lambda partition, isr: submit(partition, sorted(isr))
        broker.replicas.replica_alive = lambda replica: any(b.id == replica for b in self.live_brokers())
        broker.share_groups.persister = ClusterSharePersister(broker, self.listener)
        self.dir_assignments = DirAssignments(self.broker_id, lambda: self.broker_epoch, self.channel.call,
                                              self._assignment_wanted)
        broker.replicas.log_placed = lambda partition: self._check_dir(broker, partition.topic, partition.index)
        if (self._touched or self._removed) and not self._delta_due:
            # A combined node's voter may have committed records before the broker was here to act.
            self._delta_due = True
            asyncio.get_running_loop().call_soon(self._apply_delta)

    async def register(self, broker: Broker) -> None:
        """Follow the metadata log, then register with the controller quorum (after the listeners are
        bound: the registration names their ports). Returns once the image has caught up with the
        registration and the controller has unfenced the broker, the node serving only then (Kafka 4's
        BrokerServer): no client is answered from an image that lacks the cluster's topics (a
        restart's first replay), nor told of a cluster this broker is not yet part of."""
        endpoints = [BrokerRegistrationRequest.Listener(
            name=a.name, host=a.host, port=a.port,
            security_protocol=PROTOCOL_IDS.get(security_protocol(self.config, a.name), 0)) for a in broker.advertised]
        if not any(e.name == self.listener for e in endpoints):
            raise StartupError(f"inter.broker.listener.name {self.listener} is not one of the advertised listeners "
                               f"{[e.name for e in endpoints]}")
        registration = Registration(self.broker_id, self.cluster_id, uuid.uuid4(), endpoints, supported_features(),
                                    self.config.get_str("broker.rack") or None,
                                    list(broker.log_manager.dir_ids.values()))
        # Heartbeats on a channel of their own, so a write waiting on the controller never delays one.
        self._heartbeats = ControllerChannel(self.broker_id, QuorumLeader(self.driver), self.channel.timeout_s)
        self.lifecycle = BrokerLifecycle(registration, self._heartbeats.call, lambda: self.applied_offset,
                                         self.config.get_int("broker.heartbeat.interval.ms"),
                                         broker.log_manager.previous_broker_epoch, broker.log_manager.cordoned_ids,
                                         broker.log_manager.offline_ids)
        lifecycle = self.lifecycle
        broker.log_manager.on_dir_offline(lambda _dir, _error, _partitions: lifecycle.dir_failed())
        if self._observer:
            self.driver.start()
        timeout_ms = self.config.get_int("initial.broker.registration.timeout.ms")
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self.lifecycle.register()
        except TimeoutError:
            raise StartupError(f"Shutting down because we were unable to register with the controller quorum "
                               f"within initial.broker.registration.timeout.ms={timeout_ms}") from None
        if self.dir_assignments is not None:
            self.dir_assignments.kick()
        self._note_caught_up()
        if not self._caught_up.is_set():
            log.info("waiting for the metadata log to reach this broker's registration (offset %d)", self.broker_epoch)
            await self._caught_up.wait()
        # Caught up, the next heartbeat says so and the controller unfences the broker at once; it
        # serves once its own image lists it (what its Metadata answers tell clients).
        if not self._listed.is_set():
            log.info("waiting for the controller quorum to unfence broker %d", self.broker_id)
            await self._listed.wait()

    # --- the metadata log -------------------------------------------------------------------------------
    def _leader_address(self) -> VoterAddress | None:
        leader = self.driver.raft.leader_id
        return self.driver.address_of(leader) if leader is not None else None

    def _controller_info(self) -> BrokerInfo | None:
        found = self._leader_address()
        if found is None:
            return None
        return BrokerInfo(found.node_id, (EndPoint(self.controller_listener, found.host, found.port,
                                                   security_protocol(self.config, self.controller_listener)),), None)

    def _committed(self, batch: RaftBatch) -> None:
        for record, offset in self.metadata.apply_batch(batch):
            self.registry.apply(record, offset)
            self._changes.applied(record)
            self._note(record)
        self.applied_offset = batch.next_offset - 1
        self._image_moved()

    def _loaded(self, end_offset: int, values: list[bytes]) -> None:
        """A snapshot replaced the image (this broker's own at start, or its leader's after a
        FetchSnapshot): the partitions it no longer has stop, the others are looked at again."""
        before = {topic.topic_id for topic in self.metadata.topics().values()}
        load_snapshot(self.metadata, self.registry, end_offset, values)
        topics = list(self.metadata.topics().values())
        self._changes.reloaded(topics)
        now = {topic.topic_id for topic in topics}
        self._removed |= before - now
        self._touched |= now
        self._names.update((topic.topic_id, topic.name) for topic in topics)
        self.applied_offset = end_offset - 1
        self._image_moved()

    def _image_moved(self) -> None:
        self._changes.publish()
        if not self._delta_due and (self._touched or self._removed):
            self._delta_due = True
            asyncio.get_running_loop().call_soon(self._apply_delta)
        if self.lifecycle is not None:
            self.lifecycle.metadata_advanced()
        self._note_caught_up()

    def _note_caught_up(self) -> None:
        if 0 <= self.broker_epoch <= self.applied_offset:
            self._caught_up.set()
            if not self._listed.is_set() and any(b.id == self.broker_id for b in self.registry.live()):
                self._listed.set()

    def _note(self, record: Message) -> None:
        if isinstance(record, PartitionRecord | PartitionChangeRecord):
            self._touched.add(record.topic_id)
        elif isinstance(record, TopicRecord):
            self._names[record.topic_id] = record.name
        elif isinstance(record, RemoveTopicRecord):
            self._removed.add(record.topic_id)
            self._touched.discard(record.topic_id)

    # --- acting on the image (Kafka's ReplicaManager.applyDelta) -----------------------------------------
    def _apply_delta(self) -> None:
        self._delta_due = False
        broker = self._broker
        if broker is None:
            return
        removed, self._removed = self._removed, set()
        touched, self._touched = self._touched, set()
        for topic_id in removed:
            self._stop_all(broker, topic_id)
        leaders = {b.id: (e.host, e.port) for b in self.live_brokers() if (e := b.endpoint(self.listener)) is not None}
        now_ms = int(time.time() * 1000)
        for topic_id in touched:
            meta = self.metadata.topic_by_id(topic_id)
            if meta is not None:
                self._apply_topic(broker, meta, leaders, now_ms)

    def _apply_topic(self, broker: Broker, meta: TopicMeta, leaders: dict[int, tuple[str, int]], now_ms: int) -> None:
        hosted = self._hosted.setdefault(meta.topic_id, {})
        self._names[meta.topic_id] = meta.name
        orders = []
        for index, pmeta in sorted(meta.partitions.items()):
            known = hosted.get(index)
            if self.broker_id not in pmeta.replicas:
                if known is not None:  # moved away by a reassignment
                    del hosted[index]
                    broker.replicas.stop_replica(meta.name, index, -2, delete=True)
                continue
            now = (pmeta.leader_epoch, pmeta.partition_epoch)
            if known == now:
                continue
            hosted[index] = now
            partition = broker.replicas.partitions.get((meta.name, index))
            if (known is not None and known[0] == pmeta.leader_epoch and partition is not None
                    and partition.is_leader and pmeta.leader == self.broker_id):
                # The same leadership with a new ISR (the controller removed a fenced follower).
                partition.make_leader(pmeta.leader_epoch, pmeta.partition_epoch, self.broker_id,
                                      tuple(pmeta.replicas), list(pmeta.isr), now_ms)
                continue
            orders.append(PartitionOrder(index, pmeta.leader, pmeta.leader_epoch, pmeta.partition_epoch,
                                         tuple(pmeta.replicas), tuple(pmeta.isr)))
        if orders:
            errors = broker.replicas.become_leader_or_follower(meta, orders, leaders, now_ms)
            failed = {i: e.name for i, e in errors.items() if e not in (ErrorCode.NONE, ErrorCode.STALE_CONTROLLER_EPOCH)}
            if failed:
                log.warning("%s: partitions not opened: %s", meta.name, failed)
        for index in hosted:
            self._check_dir(broker, meta.name, index)

    # --- which log dir holds each replica (KIP-858) ---------------------------------------------------
    def _check_dir(self, broker: Broker, topic: str, index: int) -> None:
        """Tell the controller the log dir of a replica opened or moved here, if its metadata says
        another (a controller leaves it unassigned for a broker with several dirs)."""
        partition = broker.replicas.partitions.get((topic, index))
        if self.dir_assignments is None or partition is None or not partition.online:
            return
        directory = broker.log_manager.dir_ids.get(partition.log_dir)
        if directory is not None and self._assignment_wanted(partition.topic_id, index, directory):
            self.dir_assignments.submit(partition.topic_id, index, directory)

    def _assignment_wanted(self, topic_id: uuid.UUID, index: int, directory: uuid.UUID) -> bool:
        """The image gives this replica a dir (a metadata.version with directories), not this one."""
        meta = self.metadata.topic_by_id(topic_id)
        pmeta = meta.partitions.get(index) if meta is not None else None
        current = pmeta.directory(self.broker_id) if pmeta is not None else None
        return current is not None and current != directory

    def _stop_all(self, broker: Broker, topic_id: uuid.UUID) -> None:
        name = self._names.pop(topic_id, None)
        for index in sorted(self._hosted.pop(topic_id, {})):
            if name is not None:
                broker.replicas.stop_replica(name, index, -2, delete=True)

    # --- stop ---------------------------------------------------------------------------------------------
    async def controlled_shutdown(self) -> bool:
        if self.lifecycle is None or not self.config.get_bool("controlled.shutdown.enable"):
            return False
        return await self.lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)

    async def stop(self) -> None:
        if self.lifecycle is not None:
            self.lifecycle.close()
        if self.dir_assignments is not None:
            self.dir_assignments.close()
        if self.alter_partitions is not None:
            self.alter_partitions.shutdown()
        self.channel.close()
        if self._heartbeats is not None:
            self._heartbeats.close()
        if self._observer:
            await self.driver.close()
