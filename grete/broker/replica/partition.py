"""A partition hosted by this broker: the only way into its ``Log`` and the only writer of its high
watermark.

The partition owns its leader epoch and high watermark; the log owns the offsets it can know by
itself (log start, log end, last stable). Handlers, coordinators and the replica manager go
through the methods here, so the rules replication adds (a high watermark that follows the ISR, not
the leader's log end; appends that keep a leader's offsets on a follower) live in one place.

On a single node the ISR is this broker alone, so the high watermark follows the log end offset as
soon as an append returns. Long-poll fetches park a future here; an append (or a DeleteRecords, or
the partition going away) wakes them: no polling. The log's read-only views are
partition_log_view.py's, KIP-890's verification guards verification_guards.py's, the parked fetches
parked_fetches.py's.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from grete.broker.replica.parked_fetches import ParkedFetches
from grete.broker.replica.partition_log_view import PartitionLogView
from grete.broker.replica.verification_guards import VerificationGuard, VerificationGuards
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.storage.config import LogConfig
from grete.storage.log import AppendResult, Log

log = logging.getLogger(__name__)

# What a follower's fetcher asks its leader for, of a partition: (leader epoch, fetch offset = log end,
# last fetched epoch, log start), read without a Python call of its own (``map`` over the partitions
# a fetcher follows, each fetch).
fetch_position_of = operator.attrgetter("leader_epoch", "_log.log_end_offset", "_log.epochs.latest_epoch",
                                        "_log.log_start_offset")


class Partition(PartitionLogView):
    __slots__ = ("topic", "index", "topic_id", "leader_epoch", "_parked", "online", "is_leader", "leader_id", "partition_epoch", "replicated", "replicas", "isr", "_followers", "_pending_isr",
                 "_produce_waiters", "_epoch_start_offset", "alter_isr", "broker_id", "isr_changed",
                 "direct_watch", "_guards", "replica_push", "replica_alive", "_recheck_expansion")

    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, log: Log, leader_epoch: int, *,
                 is_leader: bool = True, leader_id: int = -1, partition_epoch: int = 0,
                 replicated: bool = False, broker_id: int = -1) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        super().__init__(log)
        self.leader_epoch = leader_epoch
        self._parked = ParkedFetches()
        self.online = True
        # In a cluster, what the controller's last LeaderAndIsr said (a single node always leads).
        self.is_leader = is_leader
        self.leader_id = leader_id
        self.partition_epoch = partition_epoch
        # In a cluster the high watermark follows the ISR (Kafka's replication); on the single node
        # this broker is the only replica and the high watermark is its log end offset.
        self.replicated = replicated
        self.broker_id = broker_id
        self.replicas: tuple[int, ...] = ()
        self.isr: list[int] = []
        self._followers: dict[int, FollowerState] = {}
        self._pending_isr: list[int] | None = None  # an ISR change sent to the controller, unanswered
        self._produce_waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = []
        self._epoch_start_offset = log.log_end_offset
        # Where an ISR change goes (the cluster's AlterPartition sender); None on the single node.
        self.alter_isr: Callable[[Partition, list[int]], None] | None = None
        # Whether a follower is among the live brokers of the last UpdateMetadata (Kafka 3.9's
        # isReplicaIsrEligible in ZooKeeper mode): only those are proposed for the ISR.
        self.replica_alive: Callable[[int], bool] | None = None
        self._recheck_expansion = False  # a broker joined while an ISR change was in flight
        # Told (old size, new size) of each ISR change the controller accepted (the metrics'
        # IsrShrinksPerSec / IsrExpandsPerSec).
        self.isr_changed: Callable[[int, int], None] | None = None
        # The direct path's slot updater (grete/broker/direct/consume.py), while a direct consumer
        # reads this partition; called on every change that wakes parked fetches.
        self.direct_watch: Callable[[Partition], None] | None = None
        # KIP-890 verification guards: producer id -> (epoch, guard, created ms), while a leader
        # waits for a coordinator on another broker to confirm the producer's transaction.
        self._guards = VerificationGuards()
        # The direct path's replication pusher (grete/broker/direct/push.py), while this
        # leader pushes to a follower: appends and high-watermark moves are what it sends.
        self.replica_push: Callable[[Partition], None] | None = None
        if replicated:
            return  # the controller's LeaderAndIsr sets epoch, leadership and ISR
        if log.end_offset_for_epoch(leader_epoch)[0] != leader_epoch:
            log.assign_leader_epoch(leader_epoch, log.log_end_offset)
        # The only replica holds everything in its log: the high watermark is the log end at once.
        # (The checkpointed value lags after a crash; left there, reads and coordinator loads would
        # stop short of data that was acknowledged, including offset commits and transaction state.)
        self._log.high_watermark = log.log_end_offset

    # --- the client's leader epoch (KIP-320) ------------------------------------------------------
    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fetch/ListOffsets/OffsetForLeaderEpoch fencing (KIP-320); -1 means the client has none."""
        if current_leader_epoch == -1 or current_leader_epoch == self.leader_epoch:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    # --- the log ----------------------------------------------------------------------------------
    def replace_log(self, moved: Log) -> None:
        """AlterReplicaLogDirs finished: the partition's log now lives in another dir (same offsets,
        the same bytes); the high watermark carries over."""
        high_watermark = self.high_watermark
        self._log = moved
        self._log.high_watermark = high_watermark
        self.wake()

    # --- leadership (LeaderAndIsr) ----------------------------------------------------------------
    def make_leader(self, leader_epoch: int, partition_epoch: int, leader_id: int,
                    replicas: tuple[int, ...] = (), isr: list[int] | None = None, now_ms: int = 0) -> None:
        """Kafka's Partition.makeLeader: a new leader epoch starts at the log end offset; the
        followers' fetch state starts over (those in the ISR count as caught up now)."""
        new_epoch = leader_epoch > self.leader_epoch or not self.is_leader
        if new_epoch and self._log.end_offset_for_epoch(leader_epoch)[0] != leader_epoch:
            self._log.assign_leader_epoch(leader_epoch, self._log.log_end_offset)
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_id = leader_id
        self.is_leader = True
        self.replicas = tuple(replicas) or (leader_id,)
        self.isr = list(isr) if isr is not None else [leader_id]
        self._pending_isr = None
        self._recheck_expansion = False
        if new_epoch:
            self._epoch_start_offset = self._log.log_end_offset
        kept = {} if new_epoch else self._followers  # the same epoch: replicas a reassignment adds join them
        self._followers = {r: kept.get(r) or FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
                           for r in self.replicas if r != leader_id}
        self._advance_high_watermark()
        self.wake()  # a new leader epoch: parked fetches answer (their epochs may be fenced now)

    def make_follower(self, leader_epoch: int, partition_epoch: int, leader_id: int,
                      replicas: tuple[int, ...] = ()) -> None:
        """Kafka's Partition.makeFollower: appends stop; parked fetches answer now (and are refused
        as NOT_LEADER_OR_FOLLOWER on their next try), parked acks=all produces fail."""
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_id = leader_id
        self.is_leader = False
        if replicas:
            self.replicas = tuple(replicas)
        self.isr = []
        self._followers = {}
        self._pending_isr = None
        self._recheck_expansion = False
        self._guards.clear_all()  # a verification in flight now ends in NOT_LEADER_OR_FOLLOWER
        self._complete_produce_waiters()
        self.wake()

    # --- the leader's view of its followers (Kafka's Partition/Replica fetch state) ---------------
    def update_follower(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetched from ``fetch_offset`` (its log end): caught up if it asked for the leader's
        log end (or its previous fetch's, then); it may join the ISR; the high watermark may move."""
        follower = self._followers.get(replica_id)
        if follower is None or not self.is_leader:
            return
        leo = self._log.log_end_offset
        if fetch_offset >= leo:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.last_fetch_leader_leo >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        # As Kafka's updateFollowerFetchState: an idle follower's fetch cannot move the HW.
        moved, follower.log_end_offset = follower.log_end_offset != fetch_offset, fetch_offset
        follower.last_fetch_leader_leo, follower.last_fetch_ms = leo, now_ms
        if replica_id not in self.isr and self._pending_isr is None and self._may_join_isr(replica_id, follower):
            self._propose_isr(self.isr + [replica_id])
        if moved:
            self._advance_high_watermark()

    def _may_join_isr(self, replica_id: int, follower: FollowerState) -> bool:
        return (follower.log_end_offset >= self.high_watermark and follower.log_end_offset >= self._epoch_start_offset
                and (self.replica_alive is None or self.replica_alive(replica_id)))

    def recheck_isr_expansion(self) -> None:
        """Brokers joined the cluster: followers already caught up join the ISR now. A follower
        refused while its broker was away (a ZooKeeper session that expired) may not fetch again
        soon: one that takes pushes (the direct path) says nothing more until the next append."""
        if not self.is_leader or self.alter_isr is None:
            return
        if self._pending_isr is not None:
            self._recheck_expansion = True  # once the change in flight is answered
            return
        joining = [r for r, f in self._followers.items() if r not in self.isr and self._may_join_isr(r, f)]
        if joining:
            self._propose_isr(self.isr + joining)

    def read_replicas(self, fetch_offset: int) -> list[int]:
        """Followers in the ISR that hold ``fetch_offset`` (KIP-392's candidates to serve a read)."""
        return [r for r, f in self._followers.items()
                if r in self.isr and f.log_end_offset >= fetch_offset]

    def follower_log_end(self, replica: int) -> int:
        follower = self._followers.get(replica)
        return follower.log_end_offset if follower is not None else -1

    def maybe_shrink_isr(self, now_ms: int, lag_max_ms: int) -> None:
        """Followers in the ISR that have not caught up for ``replica.lag.time.max.ms`` leave it."""
        if not self.is_leader or self._pending_isr is not None:
            return
        lagging = _lagging(self.isr, self._followers, self.broker_id, self._log.log_end_offset, now_ms - lag_max_ms)
        if lagging:
            self._propose_isr([r for r in self.isr if r not in lagging])

    def _propose_isr(self, isr: list[int]) -> None:
        if self.alter_isr is None:
            return
        _log_proposal(self, isr)
        self._pending_isr = isr
        self.alter_isr(self, isr)

    def isr_change_answered(self, error: ErrorCode, leader_epoch: int, isr: list[int], partition_epoch: int) -> None:
        """The controller's answer to an AlterPartition (Kafka's submitAlterPartition handling)."""
        if self._pending_isr is None:
            return
        _log_answer(self, error, isr, partition_epoch)
        if error == ErrorCode.NONE:
            if leader_epoch == self.leader_epoch and partition_epoch >= self.partition_epoch:
                if self.isr_changed is not None and len(isr) != len(self.isr):
                    self.isr_changed(len(self.isr), len(isr))
                self.isr = list(isr)
                self.partition_epoch = partition_epoch
            self._pending_isr = None
            self._advance_high_watermark()
            self._complete_produce_waiters()
        elif error in (ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA):
            self._pending_isr = None  # back to the last committed ISR
        # Any other error: the change stays pending until the next LeaderAndIsr settles it.
        if self._pending_isr is None and self._recheck_expansion:
            self._recheck_expansion = False
            self.recheck_isr_expansion()

    def _maximal_isr(self) -> set[int]:
        return set(self.isr) | set(self._pending_isr or ())

    def _min_isr(self) -> int:
        return min(self._log.config.min_insync_replicas, max(len(self.replicas), 1))

    def check_enough_replicas(self) -> None:
        """acks=all before appending: NOT_ENOUGH_REPLICAS while the ISR is below min.insync.replicas,
        with no message (Kafka answers one only for a record that fails validation)."""
        if self.replicated and len(self.isr) < self._min_isr():
            raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)

    async def wait_for_replication(self, required_offset: int, timeout_ms: int) -> ErrorCode:
        """acks=all after appending: NONE once the high watermark reaches ``required_offset``,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below min.insync.replicas meanwhile,
        NOT_LEADER_OR_FOLLOWER if leadership moved, REQUEST_TIMED_OUT after ``timeout_ms``."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        self._produce_waiters.append(entry := (required_offset, future))
        self._complete_produce_waiters()
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await asyncio.shield(future)
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT
        finally:
            if entry in self._produce_waiters:
                self._produce_waiters.remove(entry)

    def _complete_produce_waiters(self) -> None:
        if not self._produce_waiters:
            return
        high_watermark = self._log.high_watermark
        enough = len(self._maximal_isr()) >= self._min_isr()
        for entry in list(self._produce_waiters):
            offset, future = entry
            if future.done():
                continue
            if not self.is_leader or not self.online:
                future.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            elif high_watermark >= offset:
                future.set_result(ErrorCode.NONE if enough else ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            else:
                continue
            self._produce_waiters.remove(entry)

    @property
    def has_followers(self) -> bool:
        """Whether writes count once other replicas have them (the ISR); the single node is its own ISR."""
        return self.replicated and len(self.replicas) > 1

    @property
    def high_watermark_pending(self) -> bool:
        """A new leader that does not know yet how far its predecessor committed (below its epoch's start)."""
        return self.replicated and self.high_watermark < self._epoch_start_offset

    # --- the follower's side ----------------------------------------------------------------------
    def follower_append(self, records: bytes | bytearray | memoryview, leader_high_watermark: int, leader_log_start: int,
                        now_ms: int) -> None:
        """Append what the leader sent (offsets and epochs kept), then take its high watermark as
        far as this log reaches (Kafka's processPartitionData)."""
        log = self._log
        before = (log.high_watermark, log.log_start_offset, log.log_end_offset)
        if records:
            self.append_as_follower(records, now_ms)
        self._log.high_watermark = min(leader_high_watermark, log.log_end_offset)
        if log.log_start_offset < leader_log_start <= log.high_watermark:
            log.delete_records_before(leader_log_start)  # the leader's retention or DeleteRecords
        if (log.high_watermark, log.log_start_offset, log.log_end_offset) != before:
            self.wake()  # an empty answer that moved nothing wakes nobody

    def truncate_to(self, offset: int) -> None:
        """Drop the divergent tail from ``offset`` on (a follower after a leader change)."""
        self._log.truncate_to(offset)
        self.wake()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._log.truncate_fully_and_start_at(offset)
        self.wake()

    def update_config(self, config: LogConfig) -> None:
        self._log.update_config(config)

    # --- writes -----------------------------------------------------------------------------------
    def append(self, batch: RecordBatch, now_ms: int, verification: VerificationGuard | None = None, *,
               transaction_version: int = 0) -> AppendResult:
        """Append as leader (the log assigns offsets and stamps the leader epoch). ``verification``: the
        guard a transactional batch was verified under, which must still stand; ``transaction_version``
        2 of a marker: its bumped epoch must be above the producer's (KIP-1228)."""
        if not self.online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.topic}-{self.index} is offline")
        if not self.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"this broker is not the leader of {self.topic}-{self.index}")
        if verification is not None:
            self._check_verification(batch, verification)
        if transaction_version >= 2 and batch.is_control:
            self._check_tv2_marker(batch)
        elif self._guards.by_producer and batch.is_transactional:
            self._guards.check_sequence(batch, self._log, f"{self.topic}-{self.index}")
        result = self._log.append(batch, leader_epoch=self.leader_epoch, now_ms=now_ms)
        if self._guards.by_producer and batch.is_transactional:
            self._guards.clear(batch, transaction_version)
        self._advance_high_watermark(appended=True, control=batch.is_control)
        return result

    def _check_tv2_marker(self, batch: RecordBatch) -> None:
        entry = self._log.producer(batch.producer_id)
        if entry is not None and batch.producer_epoch <= entry.epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"Epoch of producer {batch.producer_id} is {batch.producer_epoch}, which is <= the "
                             f"last seen epoch {entry.epoch} (TV2)")

    # --- KIP-890 part 1: verification guards (Kafka's VerificationStateEntry) ---------------------
    def start_verification(self, producer_id: int, producer_epoch: int, now_ms: int, base_sequence: int = 0,
                           epoch_bump: bool = False) -> VerificationGuard | None:
        """Kafka's maybeStartTransactionVerification: None if the producer's transaction is already
        ongoing here (nothing to ask), else the guard its first batch must be appended under."""
        if self.has_ongoing_transaction(producer_id, producer_epoch):
            return None
        return self._guards.start(producer_id, producer_epoch, now_ms, self._log.config.producer_id_expiration_ms,
                                  base_sequence, epoch_bump)

    def _check_verification(self, batch: RecordBatch, guard: VerificationGuard) -> None:
        if batch.is_transactional and not self.has_ongoing_transaction(batch.producer_id, batch.producer_epoch):
            self._guards.check(batch.producer_id, guard)

    def append_as_follower(self, records: RecordBatch | bytes | bytearray | memoryview, now_ms: int) -> None:
        """Append a leader's batches as they are (offsets, epochs, timestamps kept); the high
        watermark is not moved here: a follower learns it from the leader's Fetch answers."""
        if not self.online:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{self.topic}-{self.index} is offline")
        self._log.append_as_follower(records, now_ms=now_ms)

    def _advance_high_watermark(self, *, appended: bool = False, control: bool = False) -> None:
        """Kafka's maybeIncrementLeaderHW. A single replica: everything appended is replicated. In
        a cluster: the smallest log end offset over the leader and the followers of the (maximal)
        ISR, never going back, and not moving at all while the ISR is below min.insync.replicas
        (3.9's strict rule). Completes acks=all produces; wakes only the parked fetches that can
        now return something: followers on an append, consumers when the high watermark or the
        last stable offset moved. A follower's fetch that moves neither wakes nobody, so idle
        followers and consumers do not answer each other empty.

        The last stable offset (the high watermark, or the first offset of an open transaction
        below it) moves only with the high watermark or when a ``control`` batch (a transaction
        marker) ends a transaction: an append of records opens none below the high watermark."""
        log = self._log
        high_watermark = log.high_watermark
        if not self.replicated:
            self._log.high_watermark = log.log_end_offset
        elif self.is_leader:
            if len(self.isr) >= self._min_isr():
                candidates = [log.log_end_offset]
                for replica in self._maximal_isr():
                    follower = self._followers.get(replica)
                    if follower is not None:
                        candidates.append(follower.log_end_offset)
                new = min(candidates)
                if new > high_watermark:
                    self._log.high_watermark = new
            self._complete_produce_waiters()
        consumers = control or log.high_watermark != high_watermark
        if (appended or consumers) and (self.direct_watch is not None or self.replica_push is not None):
            self._changed()
        if appended and self._parked.replicas:
            self._parked.wake_replicas()
        if consumers and self._parked.consumers:
            self._parked.wake_consumers()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset``; the new log start offset."""
        low_watermark = int(self._log.delete_records_before(offset))
        self.wake()
        return low_watermark

    # --- parked fetches ---------------------------------------------------------------------------
    def waiter(self, *, replica: bool = False, future: asyncio.Future[None] | None = None) -> asyncio.Future[None]:
        """A future for a parked fetch, done when this partition may have something new for it:
        for a follower (``replica``) records past the log end it saw, for a consumer a moved high
        watermark, last stable offset or log start; for both, any change of state (leadership,
        truncation, deletion). ``future``: one a fetch parks on each of its partitions."""
        return self._parked.park(replica, future)

    def wake(self) -> None:
        """A change every parked fetch must see (leadership, truncation, log start, going away)."""
        self._changed()
        self._parked.wake_all()

    def _changed(self) -> None:
        if self.direct_watch is not None:
            self.direct_watch(self)  # the direct path's consumer slots follow every change
        if self.replica_push is not None:
            self.replica_push(self)  # pushed followers get what changed (coalesced per loop step)

    def discard_waiter(self, future: asyncio.Future[None]) -> None:
        self._parked.discard(future)

    def go_offline(self) -> None:
        """The partition stops serving (deleted, or its log dir failed): parked fetches answer now."""
        self.online = False
        self._complete_produce_waiters()
        self.wake()


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower from its fetches (Kafka's Replica)."""

    log_end_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1


def fetch_state(partition: Partition) -> tuple[bool, int, int, int, int, int]:
    """What an empty Fetch answer from ``partition`` depends on, as values: online, leader epoch,
    high watermark, last stable offset, log start, log end (a repeated idle fetch compares them, one
    call per partition)."""
    return (partition.online, partition.leader_epoch, *partition._log.offsets())


def _ids(replicas: list[int]) -> str:
    return ",".join(map(str, replicas))


def _lagging(isr: list[int], followers: dict[int, FollowerState], leader: int, leo: int, since_ms: int) -> list[int]:
    """ISR followers behind the leader's log end that have not caught up since ``since_ms``."""
    return [r for r in isr if r != leader and (f := followers.get(r)) is not None and f.log_end_offset != leo
            and f.last_caught_up_ms < since_ms]


def _log_proposal(p: Partition, isr: list[int]) -> None:
    """An ISR change proposed to the controller, in Kafka's words."""
    if len(isr) > len(p.isr):
        log.info("[%s-%d] Expanding ISR from %s to %s", p.topic, p.index, _ids(p.isr), _ids(isr))
        return
    log.info("[%s-%d] Shrinking ISR from %s to %s. Leader: (highWatermark: %d, endOffset: %d). Out of sync replicas: "
             "%s.", p.topic, p.index, _ids(p.isr), _ids(isr), p.high_watermark, p.log_end_offset,
             _ids([r for r in p.isr if r not in isr]))


def _log_answer(p: Partition, error: ErrorCode, isr: list[int], partition_epoch: int) -> None:
    """The controller's answer to a proposed ISR change: taken, refused, or left for its next state."""
    if error == ErrorCode.NONE:
        log.info("[%s-%d] ISR updated to %s and version updated to %d", p.topic, p.index, _ids(isr), partition_epoch)
    elif error in (ErrorCode.OPERATION_NOT_ATTEMPTED, ErrorCode.INELIGIBLE_REPLICA):
        log.info("[%s-%d] Failed to alter partition to %s: %s; the ISR stays %s", p.topic, p.index,
                 _ids(p._pending_isr or []), error.name, _ids(p.isr))
    else:
        log.info("[%s-%d] Failed to alter partition to %s: %s; waiting for the controller's next state", p.topic,
                 p.index, _ids(p._pending_isr or []), error.name)
