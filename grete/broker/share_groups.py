"""Share groups (KIP-932) on this node: the one owner of share-group membership, share partitions,
share sessions and their timers.

Membership (ShareGroupHeartbeat, on the group's coordinator) and the share partitions' in-flight
state (ShareFetch, ShareAcknowledge, on each partition's leader) live in this object. Their durable
state goes to ``__share_group_state`` through a ``Persister`` to the share coordinator of each share
partition (this node's own on a single node, grete.broker.share_coordinator.LocalSharePersister; in a
cluster wherever it is, grete.broker.cluster.share_persister), as Kafka's share-partition leaders do:
a share partition is read from it the first time it is used in a leader epoch of its partition
(``prepare``), and each change is written to it in order, acknowledgements answered only once
written (``flushed``).
Timers are ``call_later`` handles (a member's session timeout, a share partition's next lock deadline);
parked share fetches wait on futures woken by new records, releases and expiries.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from grete.broker.config import BrokerConfig
from grete.broker.partition import Partition
from grete.coordinator import share_records
from grete.coordinator.group import GroupCoordinator
from grete.coordinator.group_store import Record
from grete.coordinator.metadata import MetadataStore
from grete.coordinator.share_format import ShareKey, ShareState, StateBatch
from grete.coordinator.share_group import HeartbeatResult, ShareGroup, TopicView
from grete.coordinator.share_partition import Acquired, BatchSpan, SharePartition
from grete.coordinator.share_reset import BY_DURATION, EARLIEST, LATEST, parse_reset
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.topics import SHARE_GROUP_STATE_TOPIC
from grete.storage.txnindex import AbortedRanges, aborted_ranges, in_aborted_txn

log = logging.getLogger(__name__)

FINAL_EPOCH = -1
INITIAL_EPOCH = 0

PartitionKey = tuple[uuid.UUID, int]  # (topic id, partition index)


@dataclass(slots=True)
class ShareSession:
    """KIP-932 share session: the partitions a member fetches, and the epoch its next request carries."""
    group_id: str
    member_id: str
    next_epoch: int = 0  # the opening request (epoch 0) bumps it to 1
    connection: int = 0  # the connection that opened it
    partitions: set[PartitionKey] = field(default_factory=set)

    def bump(self) -> None:
        self.next_epoch = 1 if self.next_epoch == 0x7FFFFFFF else self.next_epoch + 1


class Persister(Protocol):
    """A cluster's way to the share coordinators (grete.broker.cluster.share_persister)."""

    async def read(self, key: ShareKey, leader_epoch: int) -> ShareState | None: ...

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int, start_offset: int,
                    batches: list[StateBatch]) -> None: ...

    async def delete(self, key: ShareKey) -> None: ...

    async def summary(self, key: ShareKey) -> tuple[int, int, int] | None: ...

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None: ...

    async def end_offset(self, topic: str, index: int) -> int | None: ...


@dataclass(slots=True)
class Flush:
    """Writes of one share partition's state to its coordinator: one at a time, each of the whole
    state as it is when sent, so a write covers every change counted before it."""
    wanted: int = 0
    written: int = 0
    running: bool = False
    waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = field(default_factory=list)


@dataclass(slots=True)
class Grant:
    """What one partition of a share fetch acquired, and where to read it."""
    partition: Partition
    acquired: list[Acquired]


class ShareGroups:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore,
                 partition: Callable[[str, int], Partition]) -> None:
        self.config = config
        self.persister: Persister | None = None  # set by the broker (single node) or zk_broker (cluster)
        self.coordinator: GroupCoordinator | None = None  # where membership is kept (``attach``)
        self._prepared: dict[tuple[str, uuid.UUID, int], int] = {}  # share partition -> leader epoch read in
        self._loading: dict[tuple[str, uuid.UUID, int], asyncio.Future[None]] = {}
        self._flushes: dict[tuple[str, uuid.UUID, int], Flush] = {}
        # every share partition each group has had here, cached or not (the offsets APIs, DeleteGroups)
        self._known: dict[str, set[PartitionKey]] = {}
        self.metadata = metadata
        self._partition = partition
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[tuple[str, uuid.UUID, int], SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._member_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._lock_timers: dict[tuple[str, uuid.UUID, int], asyncio.TimerHandle] = {}
        self._waiters: list[asyncio.Future[None]] = []
        # share sessions by the connection that opened them (``id`` of its context.Session)
        self._by_connection: dict[int, set[tuple[str, str]]] = {}

    # --- configs: the group's override (ConfigResource GROUP) or the broker's key ----------------
    def group_int(self, group_id: str, group_key: str, broker_key: str) -> int:
        value = self.metadata.group_configs(group_id).get(group_key)
        return int(value) if value is not None else self.config.get_int(broker_key)

    def lock_ms(self, group_id: str) -> int:
        return self.group_int(group_id, "share.record.lock.duration.ms", "group.share.record.lock.duration.ms")

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.group_int(group_id, "share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms")

    def session_timeout_ms(self, group_id: str) -> int:
        return self.group_int(group_id, "share.session.timeout.ms", "group.share.session.timeout.ms")

    def read_committed(self, group_id: str) -> bool:
        """share.isolation.level (KIP-932): read_committed acquires up to the last stable offset and
        archives the records of aborted transactions instead of delivering them."""
        level = self.metadata.group_configs(group_id).get(
            "share.isolation.level", self.config.get_str("share.isolation.level"))
        return level == "read_committed"

    def initial_offset(self, group_id: str, partition: Partition) -> int:
        """share.auto.offset.reset: where a share partition starts the first time it is fetched; with
        by_duration, the first record whose timestamp is no older than the duration (else the end)."""
        value = self.metadata.group_configs(group_id).get(
            "share.auto.offset.reset", self.config.get_str("share.auto.offset.reset"))
        strategy, ms = parse_reset(value) or (LATEST, 0)
        if strategy == EARLIEST:
            return partition.log_start_offset
        if strategy == BY_DURATION:
            found = partition.offset_for_timestamp(_now_ms() - ms)
            if found is not None:
                return max(partition.log_start_offset, min(found[0], partition.high_watermark))
        return partition.high_watermark

    # --- membership ------------------------------------------------------------------------------
    def topic_view(self, names: set[str]) -> TopicView:
        view: dict[str, tuple[uuid.UUID, int]] = {}
        for name in names:
            meta = self.metadata.topic(name)
            if meta is not None:
                view[name] = (meta.topic_id, len(meta.partitions))
        return view

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str) -> HeartbeatResult:
        group = self.groups.get(group_id)
        if group is None:
            if member_epoch != INITIAL_EPOCH:
                return HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID,
                                       f"Member {member_id} is not a member of group {group_id}.")
            group = self.groups[group_id] = ShareGroup(group_id)
        names = group.subscribed_topics() | set(subscribed or ())
        result = group.heartbeat(member_id, member_epoch, rack_id=rack_id, subscribed=subscribed,
                                 client_id=client_id, client_host=client_host, topics=self.topic_view(names),
                                 max_size=self.config.get_int("group.share.max.size"))
        if result.error == ErrorCode.NONE and member_epoch == -1:
            self._member_gone(group_id, member_id)
        elif result.error == ErrorCode.NONE:
            self._arm_session_timer(group_id, member_id)
        return result

    # --- durable membership: the group's records in its __consumer_offsets partition -------------
    def attach(self, coordinator: GroupCoordinator) -> None:
        """A share group lives with its group coordinator, as Kafka's does: its records are written
        to the group's ``__consumer_offsets`` partition, it is rebuilt when that partition is
        loaded here, and dropped here when the partition moves away."""
        self.coordinator = coordinator
        coordinator.hand_over(self.loaded, self.unloaded)

    def loaded(self, partition: int, records: list[Record]) -> None:
        for group_id, group in share_records.load(records).items():
            self.groups[group_id] = group
            for member_id in group.members:  # restored members must go on heartbeating
                self._arm_session_timer(group_id, member_id)

    def unloaded(self, partition: int) -> None:
        """Membership only: this broker's share partitions and sessions serve on (their members
        heartbeat to the new coordinator)."""
        coordinator = self.coordinator
        assert coordinator is not None
        for group_id in [g for g in self.groups if coordinator.partition_for(g) == partition]:
            for member_id in self.groups.pop(group_id).members:
                timer = self._member_timers.pop((group_id, member_id), None)
                if timer is not None:
                    timer.cancel()

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ... for a group not served here (yet)."""
        return self.coordinator.status_error(group_id) if self.coordinator is not None else None

    async def write_membership(self, group_id: str) -> ErrorCode:
        """Write what changed in the group; the answer to the request that changed it waits for this,
        and the write finishes even if that request's client goes away."""
        coordinator = self.coordinator
        if coordinator is None:
            return ErrorCode.NONE
        group = self.groups.get(group_id)
        return await self._append(group_id, share_records.changes(group) if group is not None else [])

    async def _append(self, group_id: str, records: list[Record]) -> ErrorCode:
        coordinator = self.coordinator
        assert coordinator is not None
        return await coordinator.detached(coordinator.append_in_order(coordinator.partition_for(group_id), records))

    def _arm_session_timer(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        old = self._member_timers.pop(key, None)
        if old is not None:
            old.cancel()
        delay = self.session_timeout_ms(group_id) / 1000
        self._member_timers[key] = asyncio.get_running_loop().call_later(delay, self._session_expired, group_id,
                                                                          member_id)

    def _session_expired(self, group_id: str, member_id: str) -> None:
        self._member_timers.pop((group_id, member_id), None)
        group = self.groups.get(group_id)
        if group is not None and group.remove(member_id) is not None:
            self._member_gone(group_id, member_id)
            if self.coordinator is not None:
                self.coordinator.spawn(self.write_membership(group_id))

    def _member_gone(self, group_id: str, member_id: str) -> None:
        """A member that left or timed out. Its share sessions live on, as Kafka's share-partition
        leaders keep them (they never hear of membership): a closing consumer's final
        ShareAcknowledge may arrive after its leaving heartbeat and must still be applied. What it
        holds goes back when its session ends (final epoch, its connection closing) or its
        acquisition locks time out."""
        timer = self._member_timers.pop((group_id, member_id), None)
        if timer is not None:
            timer.cancel()

    def _release_member(self, group_id: str, member_id: str) -> None:
        released = False
        for (g, topic_id, index), sp in self.partitions.items():
            if g == group_id and sp.release_member(member_id):
                released = True
                self._persist(group_id, (topic_id, index), sp)
        if released:
            self._wake()

    # --- share sessions --------------------------------------------------------------------------
    def session_for(self, group_id: str, member_id: str, epoch: int, *, fetch: bool,
                    connection: int = 0) -> ShareSession:
        """The session a request with ``epoch`` names; epoch 0 (ShareFetch only) opens a new one,
        owned by ``connection``: when that connection closes, the session ends (as in Kafka)."""
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if not fetch:
                raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "Invalid share session epoch")
            if key in self.sessions:  # a new session replaces the old one; its records go back
                self._release_member(group_id, member_id)
                self._unbind(key)
            session = self.sessions[key] = ShareSession(group_id, member_id, connection=connection)
            self._by_connection.setdefault(connection, set()).add(key)
            return session
        session_found = self.sessions.get(key)
        if session_found is None:
            raise KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND, "Share session not found")
        if epoch != FINAL_EPOCH and epoch != session_found.next_epoch:
            raise KafkaError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "Invalid share session epoch")
        return session_found

    def close_session(self, session: ShareSession) -> None:
        """The final epoch: the session ends and what its member still holds is released."""
        key = (session.group_id, session.member_id)
        if self.sessions.get(key) is session:
            del self.sessions[key]
            self._unbind(key)
        self._release_member(session.group_id, session.member_id)
        self._maybe_unload(session.group_id)

    def connection_closed(self, connection: int) -> None:
        """The share sessions a closed connection opened end, and their records are released."""
        for key in self._by_connection.pop(connection, set()):
            session = self.sessions.get(key)
            if session is not None and session.connection == connection:
                self.close_session(session)

    def _unbind(self, key: tuple[str, str]) -> None:
        session = self.sessions.get(key)
        owner = session.connection if session is not None else None
        for conn, keys in list(self._by_connection.items()):
            if owner is None or conn == owner:
                keys.discard(key)
                if not keys:
                    del self._by_connection[conn]

    # --- share partitions ------------------------------------------------------------------------
    def share_partition(self, group_id: str, key: PartitionKey, partition: Partition) -> SharePartition:
        sp = self.partitions.get((group_id, *key))
        if sp is None:
            start = self.initial_offset(group_id, partition)
            sp = SharePartition(start, self.group_int(group_id, "share.delivery.count.limit",
                                                      "group.share.delivery.count.limit"),
                                self.group_int(group_id, "share.partition.max.record.locks",
                                               "group.share.partition.max.record.locks"))
            self.partitions[(group_id, *key)] = sp
            self._persist(group_id, key, sp)
        if sp.start < partition.log_start_offset:
            sp.reset_start(partition.log_start_offset)  # retention deleted records never delivered
            self._persist(group_id, key, sp)
        return sp

    # --- share-group offsets (Describe/Alter/DeleteShareGroupOffsets) --------------------------------
    def summaries(self, group_id: str) -> dict[PartitionKey, tuple[int, int]]:
        """(SPSO, delivery-complete count) of every share partition this node holds for the group."""
        return {(t, i): (sp.start, sp.delivery_complete_count())
                for (g, t, i), sp in self.partitions.items() if g == group_id}

    async def described(self, group_id: str, keys: list[PartitionKey] | None) -> dict[PartitionKey, tuple[int, int]]:
        """(SPSO, delivery-complete count) of the group's share partitions (``keys``; None: all it has).
        In a cluster from their share coordinators, as Kafka's group coordinator reads them (None: the
        partitions of the topics its members subscribe to, and those this broker holds)."""
        if self.persister is None:
            found = self.summaries(group_id)
            return found if keys is None else {k: found[k] for k in keys if k in found}
        if keys is None:
            group = self.groups.get(group_id)
            view = self.topic_view(group.subscribed_topics()) if group is not None else {}
            keys = sorted({(t, i) for t, n in view.values() for i in range(n)} | self.known(group_id))
        if self.metadata.topic(SHARE_GROUP_STATE_TOPIC) is None:
            return {}
        out: dict[PartitionKey, tuple[int, int]] = {}
        for key in keys:
            try:
                summary = await self.persister.summary(ShareKey(group_id, *key))
            except KafkaError as exc:
                log.info("share state summary of %s %s: %s", group_id, key, exc)
                continue
            if summary is not None:
                out[key] = (summary[1], summary[2])
        return out

    async def end_offset(self, topic: str, index: int) -> int | None:
        """A partition's high watermark for a share partition's lag: this broker's when it leads the
        partition (or is a single node), else its leader's (None if that cannot be had)."""
        local = self._hosted(topic, index)
        if self.persister is None or (local is not None and local.is_leader):
            return local.high_watermark if local is not None else None
        return await self.persister.end_offset(topic, index)

    def _hosted(self, topic: str, index: int) -> Partition | None:
        try:
            return self._partition(topic, index)
        except KafkaError:
            return None

    def known(self, group_id: str) -> set[PartitionKey]:
        """The share partitions this broker has held for the group (cached now or not)."""
        return self._known.get(group_id, set()) | {(t, i) for (g, t, i) in self.partitions if g == group_id}

    def holds(self, group_id: str) -> bool:
        """Whether a share group has this id: the classic and consumer protocols' APIs refuse it."""
        return group_id in self.groups

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def alter_start_offset(self, group_id: str, key: PartitionKey, offset: int) -> None:
        """AlterShareGroupOffsets on an empty group: the share partition starts at ``offset``, nothing
        in flight (the group is created empty if it does not exist, as Kafka does)."""
        partition = self.resolve(key)
        self.groups.setdefault(group_id, ShareGroup(group_id))
        sp = self.partitions.get((group_id, *key))
        if sp is None:
            sp = self.share_partition(group_id, key, partition)
        sp.reset_start(offset)
        sp.runs.clear()
        sp.end = sp.start = offset
        self._persist(group_id, key, sp)

    async def alter(self, group_id: str, key: PartitionKey, offset: int) -> None:
        """AlterShareGroupOffsets, through the share partition's coordinator: a new state
        (state epoch + 1, as Kafka's group coordinator initializes it), which the partition's leader
        reads when it next loads the share partition (its cached copy goes when the group's last
        share session there ends, or when a write of it is FENCED_STATE_EPOCH)."""
        if group_id not in self.groups:  # created empty, as Kafka does, and kept
            self.groups[group_id] = ShareGroup(group_id)
            error = await self.write_membership(group_id)
            if error != ErrorCode.NONE:
                raise KafkaError(error, None)
        if self.persister is None:
            self.alter_start_offset(group_id, key, offset)
            return
        share_key = ShareKey(group_id, *key)
        found = await self.persister.summary(share_key)
        await self.persister.initialize(share_key, found[0] + 1 if found is not None else 0, offset)
        self._drop((group_id, *key))
        self._known.setdefault(group_id, set()).add(key)

    async def delete_offsets(self, group_id: str, topic_id: uuid.UUID) -> None:
        """DeleteShareGroupOffsets: every partition's state goes at its coordinator."""
        if self.persister is None:
            self.delete_start_offsets(group_id, topic_id)
            return
        meta = self.metadata.topic_by_id(topic_id)
        for index in sorted(meta.partitions) if meta is not None else []:
            if self.metadata.topic(SHARE_GROUP_STATE_TOPIC) is not None:
                await self.persister.delete(ShareKey(group_id, topic_id, index))
            self._drop((group_id, topic_id, index))
            self._known.get(group_id, set()).discard((topic_id, index))

    def _maybe_unload(self, group_id: str) -> None:
        """Once the group has no share session on this broker, its share partitions here are dropped
        after their last writes, so the next one is read from the coordinator again (which an
        AlterShareGroupOffsets or DeleteShareGroupOffsets of the empty group may have changed)."""
        if self.persister is None or any(g == group_id for g, _ in self.sessions):
            return
        keys = [(t, i) for (g, t, i) in self.partitions if g == group_id]
        if keys:
            asyncio.ensure_future(self._unload_when_written(group_id, keys))

    async def _unload_when_written(self, group_id: str, keys: list[PartitionKey]) -> None:
        await self.flushed(group_id, keys)
        if any(g == group_id for g, _ in self.sessions):
            return  # a member came back meanwhile
        for key in keys:
            tkey = (group_id, *key)
            flush = self._flushes.get(tkey)
            sp = self.partitions.get(tkey)
            if (flush is None or not flush.running) and (sp is None or sp.next_deadline() is None):
                self._drop(tkey)

    def _drop(self, tkey: tuple[str, uuid.UUID, int]) -> None:
        self.partitions.pop(tkey, None)
        self._prepared.pop(tkey, None)
        timer = self._lock_timers.pop(tkey, None)
        if timer is not None:
            timer.cancel()
        flush = self._flushes.get(tkey)
        if flush is not None and not flush.running:
            del self._flushes[tkey]

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups on a share group: NON_EMPTY_GROUP while it has members, else the group and
        its share partitions' state go (tombstones in the state topic and ``__consumer_offsets``)."""
        if self.has_members(group_id):
            return ErrorCode.NON_EMPTY_GROUP
        for topic_id in {t for t, _i in self.known(group_id)}:
            self.delete_start_offsets(group_id, topic_id)
        group = self.groups.pop(group_id, None)
        self._known.pop(group_id, None)
        if group is None or self.coordinator is None:
            return ErrorCode.NONE
        return await self._append(group_id, share_records.tombstones(group))

    def delete_start_offsets(self, group_id: str, topic_id: uuid.UUID) -> list[int]:
        """DeleteShareGroupOffsets: the group forgets the topic's share partitions; their indexes."""
        gone = sorted(i for (t, i) in self.known(group_id) if t == topic_id)
        for index in gone:
            self._drop((group_id, topic_id, index))
            self._known.get(group_id, set()).discard((topic_id, index))
            if self.persister is not None:
                asyncio.ensure_future(self._forget(ShareKey(group_id, topic_id, index)))
        return gone

    # --- persistence -------------------------------------------------------------------------------
    def load(self, states: dict[ShareKey, ShareState]) -> int:
        """A single node's start-up: its share partitions from its own share coordinator (so that the
        offsets APIs know them before a member comes back); how many."""
        for key, state in states.items():
            try:
                partition = self.resolve((key.topic_id, key.partition))
            except KafkaError:
                continue  # the topic is gone
            tkey = (key.group_id, key.topic_id, key.partition)
            self.partitions[tkey] = self._restored(key.group_id, state)
            self._prepared[tkey] = partition.leader_epoch
            self._known.setdefault(key.group_id, set()).add((key.topic_id, key.partition))
        return len(self.partitions)

    def _restored(self, group_id: str, state: ShareState) -> SharePartition:
        sp = SharePartition.restore(
            state.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                 for b in state.batches],
            self.group_int(group_id, "share.delivery.count.limit", "group.share.delivery.count.limit"),
            self.group_int(group_id, "share.partition.max.record.locks", "group.share.partition.max.record.locks"))
        sp.state_epoch = state.state_epoch
        return sp

    def _persist(self, group_id: str, key: PartitionKey, sp: SharePartition) -> None:
        if self.persister is not None:
            self._schedule_write(group_id, key)

    # --- a cluster's share coordinators -----------------------------------------------------------------
    async def prepare(self, group_id: str, key: PartitionKey) -> None:
        """The share partition as its coordinator has it, read once per leader epoch of the partition
        (a new leader starts where the old one's last write left it); a share partition never written
        is initialized there first (``share.auto.offset.reset``)."""
        if self.persister is None:
            return
        partition = self.resolve(key)
        if not partition.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        tkey = (group_id, *key)
        if self._prepared.get(tkey) == partition.leader_epoch and tkey in self.partitions:
            return
        pending = self._loading.get(tkey)
        if pending is None:
            pending = self._loading[tkey] = asyncio.ensure_future(self._read(group_id, key, partition))
            pending.add_done_callback(lambda _f: self._loading.pop(tkey, None))
        await asyncio.shield(pending)

    async def _read(self, group_id: str, key: PartitionKey, partition: Partition) -> None:
        assert self.persister is not None
        epoch, share_key = partition.leader_epoch, ShareKey(group_id, *key)
        state = await self.persister.read(share_key, epoch)
        if state is None or state.start_offset < 0:
            start = self.initial_offset(group_id, partition)
            await self.persister.write(share_key, 0, epoch, start, [])
            sp = SharePartition(start, self.group_int(group_id, "share.delivery.count.limit",
                                                      "group.share.delivery.count.limit"),
                                self.group_int(group_id, "share.partition.max.record.locks",
                                               "group.share.partition.max.record.locks"))
        else:
            sp = self._restored(group_id, state)
        timer = self._lock_timers.pop((group_id, *key), None)
        if timer is not None:
            timer.cancel()
        self.partitions[(group_id, *key)] = sp
        self._prepared[(group_id, *key)] = epoch
        self._known.setdefault(group_id, set()).add(key)

    async def _forget(self, key: ShareKey) -> None:
        """The coordinator's state of a share partition the group no longer has (a tombstone)."""
        assert self.persister is not None
        try:
            await self.persister.delete(key)
        except KafkaError as exc:
            log.warning("share state of %s not deleted: %s", key, exc)

    def _schedule_write(self, group_id: str, key: PartitionKey) -> None:
        tkey = (group_id, *key)
        flush = self._flushes.setdefault(tkey, Flush())
        flush.wanted += 1
        if not flush.running:
            flush.running = True
            asyncio.ensure_future(self._write_loop(tkey, flush))

    async def _write_loop(self, tkey: tuple[str, uuid.UUID, int], flush: Flush) -> None:
        assert self.persister is not None
        try:
            while flush.written < flush.wanted:
                target = flush.wanted
                sp = self.partitions.get(tkey)
                error = ErrorCode.NONE
                if sp is not None:
                    try:
                        await self.persister.write(ShareKey(*tkey), sp.state_epoch, self._prepared.get(tkey, -1),
                                                   sp.start, [StateBatch(*b) for b in sp.state_batches()])
                    except KafkaError as exc:
                        error = exc.code
                        # altered meanwhile, or another broker leads the partition now: read it again
                        if error in (ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH):
                            self.partitions.pop(tkey, None)
                            self._prepared.pop(tkey, None)
                flush.written = target
                done = [w for w in flush.waiters if w[0] <= target]
                flush.waiters = [w for w in flush.waiters if w[0] > target]
                for _, future in done:
                    if not future.done():
                        future.set_result(error)
        finally:
            flush.running = False

    async def session_closed(self, session: ShareSession) -> None:
        """The final epoch: the session ends, what its member held is released, and the answer waits
        until that release is written (a restart right after it finds the records Available)."""
        self.close_session(session)
        await self.flushed(session.group_id, [(t, i) for (g, t, i) in self.partitions if g == session.group_id])

    async def flushed(self, group_id: str, keys: Iterable[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
        """Once every change made so far to these share partitions is with their coordinators: the
        error of each write that failed."""
        waits: dict[PartitionKey, asyncio.Future[ErrorCode]] = {}
        for key in keys:
            flush = self._flushes.get((group_id, *key))
            if flush is not None and flush.written < flush.wanted:
                future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
                flush.waiters.append((flush.wanted, future))
                waits[key] = future
        return {key: await future for key, future in waits.items()}

    def resolve(self, key: PartitionKey) -> Partition:
        meta = self.metadata.topic_by_id(key[0])
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
        return self._partition(meta.name, key[1])

    def acknowledge(self, group_id: str, member_id: str, key: PartitionKey,
                    batches: list[tuple[int, int, list[int]]]) -> ErrorCode:
        partition = self.resolve(key)
        sp = self.share_partition(group_id, key, partition)
        now, lock = _now_ms(), self.lock_ms(group_id)
        for first, last, types in sorted(batches):
            error = sp.acknowledge(member_id, first, last, types, now_ms=now, lock_ms=lock)
            if error != ErrorCode.NONE:
                self._persist(group_id, key, sp)
                return error
        self._persist(group_id, key, sp)
        self._arm_lock_timer(group_id, key, sp)
        self._wake()
        return ErrorCode.NONE

    def acquire(self, group_id: str, member_id: str, key: PartitionKey, max_records: int, max_bytes: int,
                *, record_limit: bool, batch_size: int) -> Grant:
        partition = self.resolve(key)
        sp = self.share_partition(group_id, key, partition)
        committed = self.read_committed(group_id)
        end = partition.last_stable_offset if committed else partition.high_watermark
        aborted = aborted_ranges(partition.aborted_txns(sp.end, end)) if committed and sp.end < end else {}
        acquired = sp.acquire(member_id, _spans(partition, sp.end, end, max_bytes, aborted), max_records,
                              now_ms=_now_ms(), lock_ms=self.lock_ms(group_id), record_limit=record_limit,
                              batch_size=batch_size)
        if acquired:
            self._arm_lock_timer(group_id, key, sp)
        return Grant(partition, acquired)

    def _arm_lock_timer(self, group_id: str, key: PartitionKey, sp: SharePartition) -> None:
        """One timer per share partition, at its earliest acquisition-lock deadline."""
        tkey = (group_id, *key)
        old = self._lock_timers.pop(tkey, None)
        if old is not None:
            old.cancel()
        deadline = sp.next_deadline()
        if deadline is not None:
            delay = max(0.0, (deadline - _now_ms()) / 1000)
            self._lock_timers[tkey] = asyncio.get_running_loop().call_later(delay, self._locks_due, group_id, key)

    def _locks_due(self, group_id: str, key: PartitionKey) -> None:
        self._lock_timers.pop((group_id, *key), None)
        sp = self.partitions.get((group_id, *key))
        if sp is None:
            return
        if sp.expire_locks(_now_ms()):
            self._persist(group_id, key, sp)
            self._wake()
        self._arm_lock_timer(group_id, key, sp)

    # --- parked share fetches ----------------------------------------------------------------------
    def waiter(self) -> asyncio.Future[None]:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    def discard_waiter(self, future: asyncio.Future[None]) -> None:
        if future in self._waiters:
            self._waiters.remove(future)

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def shutdown(self) -> None:
        for timer in [*self._member_timers.values(), *self._lock_timers.values()]:
            timer.cancel()
        self._member_timers.clear()
        self._lock_timers.clear()
        self._wake()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _spans(partition: Partition, start: int, end: int, max_bytes: int,
           aborted: AbortedRanges) -> Iterator[BatchSpan]:
    """Batches from ``start`` below ``end`` (the high watermark, or the last stable offset), until
    ``max_bytes`` (one at least). Markers, and the batches of the ``aborted`` transactions, are
    archived: a read_committed share group never delivers them (Kafka's
    filterAbortedTransactionalAcquiredRecords). One header read per batch, no records decoded."""
    if start >= end:
        return
    total = 0
    for batch in partition.batches(start, end):
        if batch.base_offset >= end:
            return
        if total and total + batch.size > max_bytes:
            return
        total += batch.size
        archived = batch.is_control or in_aborted_txn(aborted, batch)
        yield BatchSpan(batch.base_offset, min(batch.last_offset, end - 1), archived)
