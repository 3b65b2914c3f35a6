"""Share groups (KIP-932) on this node: the one owner of share-group membership, share partitions,
share sessions and their timers.

Membership (ShareGroupHeartbeat, on the group's coordinator: share_membership.py) and the share
partitions' in-flight state (ShareFetch, ShareAcknowledge, on each partition's leader: here) are
reached through this object. Their durable state goes to ``__share_group_state`` through a
``Persister`` to the share coordinator of each share partition (share_persistence.py), as Kafka's
share-partition leaders do: a share partition is read from it the first time it is used in a leader
epoch of its partition (``prepare``), and each change is written to it in order, acknowledgements
answered only once written (``flushed``). Share sessions are share_sessions.py's.
Timers are ``call_later`` handles (a member's session timeout, a share partition's next lock deadline);
parked share fetches wait on futures woken by new records, releases and expiries.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from grete.broker.config import BrokerConfig
from grete.broker.groups.share_membership import ShareMembership
from grete.broker.groups.share_persistence import Persister, SharePersistence, ShareTopicPartition
from grete.broker.groups.share_sessions import PartitionKey, ShareSession, ShareSessions
from grete.broker.groups.share_settings import ShareSettings, now_ms
from grete.broker.replica.partition import Partition
from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.metadata import MetadataStore
from grete.coordinator.share import share_records
from grete.coordinator.share.share_format import ShareKey, ShareState
from grete.coordinator.share.share_group import HeartbeatResult, ShareGroup
from grete.coordinator.share.share_partition import Acquired, BatchSpan, SharePartition
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.topics import SHARE_GROUP_STATE_TOPIC
from grete.storage.txnindex import AbortedRanges, aborted_ranges, in_aborted_txn

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Grant:
    """What one partition of a share fetch acquired, and where to read it."""
    partition: Partition
    acquired: list[Acquired]


class ShareGroups:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore,
                 partition: Callable[[str, int], Partition]) -> None:
        self.config = config
        self.metadata = metadata
        self._partition = partition
        self.settings = ShareSettings(config, metadata)
        self.members = ShareMembership(config, metadata, self.settings)
        self.share_sessions = ShareSessions(self._release_member)
        self.partitions: dict[ShareTopicPartition, SharePartition] = {}
        self.persistence = SharePersistence(self.settings, self.partitions, self.resolve, self._cancel_lock_timer)
        self.groups = self.members.groups
        self.sessions = self.share_sessions.sessions
        self._lock_timers: dict[ShareTopicPartition, asyncio.TimerHandle] = {}
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def persister(self) -> Persister | None:
        return self.persistence.persister

    @persister.setter
    def persister(self, persister: Persister | None) -> None:
        self.persistence.persister = persister

    # --- what the handlers ask of the parts --------------------------------------------------------
    def lock_ms(self, group_id: str) -> int:
        return self.settings.lock_ms(group_id)

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return self.settings.heartbeat_interval_ms(group_id)

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, *, rack_id: str | None,
                  subscribed: list[str] | None, client_id: str, client_host: str) -> HeartbeatResult:
        return self.members.heartbeat(group_id, member_id, member_epoch, rack_id=rack_id, subscribed=subscribed,
                                      client_id=client_id, client_host=client_host)

    def attach(self, coordinator: GroupCoordinator) -> None:
        self.members.attach(coordinator)

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        return self.members.coordinator_error(group_id)

    async def write_membership(self, group_id: str) -> ErrorCode:
        return await self.members.write_membership(group_id)

    def holds(self, group_id: str) -> bool:
        return self.members.holds(group_id)

    def has_members(self, group_id: str) -> bool:
        return self.members.has_members(group_id)

    def session_for(self, group_id: str, member_id: str, epoch: int, *, fetch: bool,
                    connection: int = 0) -> ShareSession:
        return self.share_sessions.session_for(group_id, member_id, epoch, fetch=fetch, connection=connection)

    def load(self, states: dict[ShareKey, ShareState]) -> int:
        return self.persistence.load(states)

    async def prepare(self, group_id: str, key: PartitionKey) -> None:
        await self.persistence.prepare(group_id, key)

    async def flushed(self, group_id: str, keys: Iterable[PartitionKey]) -> dict[PartitionKey, ErrorCode]:
        return await self.persistence.flushed(group_id, keys)

    # --- share sessions ---------------------------------------------------------------------------
    def close_session(self, session: ShareSession) -> None:
        """The final epoch: the session ends and what its member still holds is released."""
        key = (session.group_id, session.member_id)
        if self.sessions.get(key) is session:
            del self.sessions[key]
            self.share_sessions.unbind(key)
        self._release_member(session.group_id, session.member_id)
        self._maybe_unload(session.group_id)

    def connection_closed(self, connection: int) -> None:
        """The share sessions a closed connection opened end, and their records are released."""
        for key in self.share_sessions.by_connection.pop(connection, set()):
            session = self.sessions.get(key)
            if session is not None and session.connection == connection:
                self.close_session(session)

    async def session_closed(self, session: ShareSession) -> None:
        """The final epoch: the session ends, what its member held is released, and the answer waits
        until that release is written (a restart right after it finds the records Available)."""
        self.close_session(session)
        await self.persistence.flushed(session.group_id, [(t, i) for (g, t, i) in self.partitions if g == session.group_id])

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
        await self.persistence.flushed(group_id, keys)
        if any(g == group_id for g, _ in self.sessions):
            return  # a member came back meanwhile
        for key in keys:
            tkey = (group_id, *key)
            flush = self.persistence.flushes.get(tkey)
            sp = self.partitions.get(tkey)
            if (flush is None or not flush.running) and (sp is None or sp.next_deadline() is None):
                self.persistence.drop(tkey)

    # --- share partitions: acquiring, acknowledging, acquisition locks ----------------------------
    def resolve(self, key: PartitionKey) -> Partition:
        meta = self.metadata.topic_by_id(key[0])
        if meta is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID)
        return self._partition(meta.name, key[1])

    def share_partition(self, group_id: str, key: PartitionKey, partition: Partition) -> SharePartition:
        sp = self.partitions.get((group_id, *key))
        if sp is None:
            start = self.settings.initial_offset(group_id, partition)
            sp = SharePartition(start, self.settings.group_int(group_id, "share.delivery.count.limit",
                                                               "group.share.delivery.count.limit"),
                                self.settings.group_int(group_id, "share.partition.max.record.locks",
                                                        "group.share.partition.max.record.locks"))
            self.partitions[(group_id, *key)] = sp
            self.persistence.persist(group_id, key, sp)
        if sp.start < partition.log_start_offset:
            sp.reset_start(partition.log_start_offset)  # retention deleted records never delivered
            self.persistence.persist(group_id, key, sp)
        return sp

    def acquire(self, group_id: str, member_id: str, key: PartitionKey, max_records: int, max_bytes: int,
                *, record_limit: bool, batch_size: int) -> Grant:
        partition = self.resolve(key)
        sp = self.share_partition(group_id, key, partition)
        committed = self.settings.read_committed(group_id)
        end = partition.last_stable_offset if committed else partition.high_watermark
        aborted = aborted_ranges(partition.aborted_txns(sp.end, end)) if committed and sp.end < end else {}
        acquired = sp.acquire(member_id, _spans(partition, sp.end, end, max_bytes, aborted), max_records,
                              now_ms=now_ms(), lock_ms=self.settings.lock_ms(group_id), record_limit=record_limit,
                              batch_size=batch_size)
        if acquired:
            self._arm_lock_timer(group_id, key, sp)
        return Grant(partition, acquired)

    def acknowledge(self, group_id: str, member_id: str, key: PartitionKey,
                    batches: list[tuple[int, int, list[int]]]) -> ErrorCode:
        partition = self.resolve(key)
        sp = self.share_partition(group_id, key, partition)
        now, lock = now_ms(), self.settings.lock_ms(group_id)
        for first, last, types in sorted(batches):
            error = sp.acknowledge(member_id, first, last, types, now_ms=now, lock_ms=lock)
            if error != ErrorCode.NONE:
                self.persistence.persist(group_id, key, sp)
                return error
        self.persistence.persist(group_id, key, sp)
        self._arm_lock_timer(group_id, key, sp)
        self._wake()
        return ErrorCode.NONE

    def _release_member(self, group_id: str, member_id: str) -> None:
        released = False
        for (g, topic_id, index), sp in self.partitions.items():
            if g == group_id and sp.release_member(member_id):
                released = True
                self.persistence.persist(group_id, (topic_id, index), sp)
        if released:
            self._wake()

    def _arm_lock_timer(self, group_id: str, key: PartitionKey, sp: SharePartition) -> None:
        """One timer per share partition, at its earliest acquisition-lock deadline."""
        tkey = (group_id, *key)
        old = self._lock_timers.pop(tkey, None)
        if old is not None:
            old.cancel()
        deadline = sp.next_deadline()
        if deadline is not None:
            delay = max(0.0, (deadline - now_ms()) / 1000)
            self._lock_timers[tkey] = asyncio.get_running_loop().call_later(delay, self._locks_due, group_id, key)

    def _cancel_lock_timer(self, tkey: ShareTopicPartition) -> None:
        timer = self._lock_timers.pop(tkey, None)
        if timer is not None:
            timer.cancel()

    def _locks_due(self, group_id: str, key: PartitionKey) -> None:
        self._lock_timers.pop((group_id, *key), None)
        sp = self.partitions.get((group_id, *key))
        if sp is None:
            return
        if sp.expire_locks(now_ms()):
            self.persistence.persist(group_id, key, sp)
            self._wake()
        self._arm_lock_timer(group_id, key, sp)

    # --- share-group offsets (Describe/Alter/DeleteShareGroupOffsets), DeleteGroups ---------------
    def summaries(self, group_id: str) -> dict[PartitionKey, tuple[int, int]]:
        """(SPSO, delivery-complete count) of every share partition this node holds for the group."""
        return {(t, i): (sp.start, sp.delivery_complete_count())
                for (g, t, i), sp in self.partitions.items() if g == group_id}

    async def described(self, group_id: str, keys: list[PartitionKey] | None) -> dict[PartitionKey, tuple[int, int]]:
        """(SPSO, delivery-complete count) of the group's share partitions (``keys``; None: all it has).
        In a cluster from their share coordinators, as Kafka's group coordinator reads them (None: the
        partitions it has assigned, those of the topics its members subscribe to, and those this
        broker holds)."""
        if self.persister is None:
            found = self.summaries(group_id)
            return found if keys is None else {k: found[k] for k in keys if k in found}
        if keys is None:
            group = self.groups.get(group_id)
            view = self.members.topic_view(group.subscribed_topics()) if group is not None else {}
            assigned = {(t, i) for t, topic in group.initialized.items() for i in topic.partitions} if group else set()
            keys = sorted({(t, i) for t, n in view.values() for i in range(n)} | assigned | self.known(group_id))
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
        return self.persistence.held.get(group_id, set()) | {(t, i) for (g, t, i) in self.partitions if g == group_id}

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
        self.persistence.persist(group_id, key, sp)

    async def alter(self, group_id: str, key: PartitionKey, offset: int) -> None:
        """AlterShareGroupOffsets, through the share partition's coordinator: a new state
        (state epoch + 1, as Kafka's group coordinator initializes it), which the partition's leader
        reads when it next loads the share partition (its cached copy goes when the group's last
        share session there ends, or when a write of it is FENCED_STATE_EPOCH)."""
        if group_id not in self.groups:  # created empty, as Kafka does, and kept
            self.groups[group_id] = ShareGroup(group_id)
            error = await self.members.write_membership(group_id)
            if error != ErrorCode.NONE:
                raise KafkaError(error, None)
        if self.persister is None:
            self.alter_start_offset(group_id, key, offset)
            return
        share_key = ShareKey(group_id, *key)
        found = await self.persister.summary(share_key)
        await self.persister.initialize(share_key, found[0] + 1 if found is not None else 0, offset)
        self.persistence.drop((group_id, *key))
        self.persistence.held.setdefault(group_id, set()).add(key)

    async def delete_offsets(self, group_id: str, topic_id: uuid.UUID) -> None:
        """DeleteShareGroupOffsets: every partition's state goes at its coordinator."""
        if self.persister is None:
            self.delete_start_offsets(group_id, topic_id)
            return
        meta = self.metadata.topic_by_id(topic_id)
        for index in sorted(meta.partitions) if meta is not None else []:
            if self.metadata.topic(SHARE_GROUP_STATE_TOPIC) is not None:
                await self.persister.delete(ShareKey(group_id, topic_id, index))
            self.persistence.drop((group_id, topic_id, index))
            self.persistence.held.get(group_id, set()).discard((topic_id, index))
        group = self.groups.get(group_id)
        if group is not None and group.initialized.pop(topic_id, None) is not None:
            await self.members.write_membership(group_id)

    def delete_start_offsets(self, group_id: str, topic_id: uuid.UUID) -> list[int]:
        """DeleteShareGroupOffsets: the group forgets the topic's share partitions; their indexes."""
        gone = sorted(i for (t, i) in self.known(group_id) if t == topic_id)
        for index in gone:
            self.persistence.drop((group_id, topic_id, index))
            self.persistence.held.get(group_id, set()).discard((topic_id, index))
            if self.persister is not None:
                asyncio.ensure_future(self.persistence.forget(ShareKey(group_id, topic_id, index)))
        return gone

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups on a share group: NON_EMPTY_GROUP while it has members, else the group and
        its share partitions' state go (tombstones in the state topic and ``__consumer_offsets``)."""
        if self.members.has_members(group_id):
            return ErrorCode.NON_EMPTY_GROUP
        for topic_id in {t for t, _i in self.known(group_id)}:
            self.delete_start_offsets(group_id, topic_id)
        group = self.groups.pop(group_id, None)
        self.persistence.held.pop(group_id, None)
        if group is None or self.members.coordinator is None:
            return ErrorCode.NONE
        return await self.members.append(group_id, share_records.tombstones(group))

    # --- parked share fetches ---------------------------------------------------------------------
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
        self.members.cancel_timers()
        for timer in self._lock_timers.values():
            timer.cancel()
        self._lock_timers.clear()
        self._wake()


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
