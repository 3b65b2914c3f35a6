"""The part of a KRaft replica that leads: appends, answers fetches, moves the high watermark; and
the bookkeeping every state shares (the current state, outgoing messages, quorum-state to persist)."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable

from grete.coordinator.kraft.quorum import QuorumState
from grete.coordinator.kraft.raft_log import (
    BOOTSTRAP_SNAPSHOT,
    LEADER_CHANGE,
    OffsetAndEpoch,
    RaftBatch,
    RaftLog,
)
from grete.coordinator.kraft.raft_messages import (
    BeginQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LogAppended,
    LogTruncated,
    RaftMessage,
    RaftOutput,
    RaftRequest,
)
from grete.coordinator.kraft.raft_states import (
    Candidate,
    EpochState,
    Follower,
    Leader,
    ParkedFetch,
    Prospective,
    RaftConfig,
    ReplicaProgress,
    RequestManager,
    Resigned,
    Unattached,
)
from grete.coordinator.kraft.voters import BEFORE_LOG, VoterHistory, VoterNode, updated
from grete.protocol.codec import ZERO_UUID
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import DescribeQuorumResponse
from grete.protocol.metadata import KRaftVersionRecord, LeaderChangeMessage
from grete.protocol.metadata_frame import CONTROL_VALUE_VERSION, decode_control_value, encode_control_value
from grete.protocol.records.control import ControlType

# A leader that has not heard from a majority of voters for 1.5 fetch timeouts resigns (Kafka's).
CHECK_QUORUM_TIMEOUT_FACTOR = 1.5


class LeaderRole(ABC):
    state: EpochState

    def __init__(self, node_id: int, history: VoterHistory, log: RaftLog, config: RaftConfig,
                 local: VoterNode | None = None) -> None:
        self.node_id = node_id
        # The voter sets of the log (static, or a dynamic quorum's VotersRecords); the latest applies.
        self.history = history
        # This replica as a voter set lists it: its directory id, endpoints and kraft.version range.
        self.local = local if local is not None else VoterNode(node_id)
        self.log = log
        self.config = config
        self.requests = RequestManager(config.request_timeout_ms, config.retry_backoff_ms)
        self.high_watermark = 0  # committed below this offset, as far as this replica knows
        self.out = RaftOutput()
        self._persisted = (-1, -1, -1)
        self._correlation = 0

    @abstractmethod
    def resign_after_check_quorum(self, state: Leader, now_ms: int) -> None: ...

    @property
    def voters(self) -> frozenset[int]:
        return self.history.latest.ids

    @property
    def directory_id(self) -> uuid.UUID:
        return self.local.directory_id

    # --- the log and its voter sets ---------------------------------------------------------------
    def load_voter_history(self) -> None:
        """Read the voter sets and kraft.version the log holds (its control batches), at start."""
        for batch in self.log.control_batches():
            self._track_controls(batch)

    def appended(self, batch: RaftBatch) -> None:
        """``batch`` goes into the log (a leader's append or a follower's fetch)."""
        self.log.append(batch)
        self.out.log_changes.append(LogAppended(batch))
        if self._track_controls(batch):
            self.voters_changed()

    def truncated(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.out.log_changes.append(LogTruncated(offset))
        self.history.truncate(offset)
        self.voters_changed()

    def reset_voters(self, history: VoterHistory) -> None:
        """The voter sets of a snapshot that replaced the log (the records before it are gone)."""
        self.history = history
        self.voters_changed()

    def _track_controls(self, batch: RaftBatch) -> bool:
        """Whether ``batch`` holds a voter set or a kraft.version, now in the history."""
        changed = False
        for offset, control_type, value in batch.typed_controls():
            if control_type in (ControlType.KRAFT_VERSION, ControlType.KRAFT_VOTERS):
                self.history.control_record(offset, control_type, decode_control_value(control_type, value))
                changed = True
        return changed

    def voters_changed(self) -> None:
        """The latest voter set may differ: a leader counts the new set's voters from now on (a new
        voter from where it fetched as an observer), as Kafka's LeaderState does."""
        state = self.state
        if not isinstance(state, Leader):
            return
        offsets = state.voter_offsets
        state.voter_offsets = {v: offsets.get(v, state.observer_offsets.get(v, -1)) for v in self.voters}
        state.unacked &= self.voters
        for voter in self.voters:  # a new voter is no observer any more
            state.observer_offsets.pop(voter, None)

    # --- the state ----------------------------------------------------------------------------
    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int | None:
        state = self.state
        if isinstance(state, Leader | Resigned):
            return self.node_id
        if isinstance(state, Follower | Prospective):  # a prospective still names the leader it followed
            return state.leader_id
        return None

    @property
    def role(self) -> str:
        """The state's name, Kafka's: Unattached, Prospective, Candidate, Leader, Follower, Resigned."""
        return type(self.state).__name__

    def leader_or_none(self) -> int:
        leader = self.leader_id
        return leader if leader is not None else -1

    def voted_for(self) -> int | None:
        state = self.state
        if isinstance(state, Unattached | Prospective | Follower):
            return state.voted_id
        if isinstance(state, Candidate | Leader | Resigned):
            return self.node_id
        return None

    def quorum_state(self) -> QuorumState:
        """QuorumStateData as it stands: the epoch, its leader, this replica's vote in it."""
        voted = self.voted_for()
        return QuorumState(self.leader_or_none(), self.epoch, voted if voted is not None else -1)

    def set_state(self, new: EpochState) -> None:
        old = self.state
        before = (old.epoch, self.leader_id)
        self.state = new
        self.requests.reset()
        if isinstance(old, Leader):  # parked fetches learn who leads now
            for parked in old.parked.values():
                self.send(parked.sender, self._fetch_answer(parked.request, ErrorCode.NOT_LEADER_OR_FOLLOWER))
        persisted = self.quorum_state()
        key = (persisted.leader_id, persisted.leader_epoch, persisted.voted_id)
        if key != self._persisted:
            self._persisted = key
            self.out.quorum_state = persisted
        if (new.epoch, self.leader_id) != before:
            self.out.leader_changed = True

    # --- output -------------------------------------------------------------------------------
    def send(self, destination: int, message: RaftMessage) -> None:
        self.out.messages.append((destination, message))

    def send_request(self, destination: int, now_ms: int, build: Callable[[int], RaftRequest]) -> None:
        self._correlation += 1
        self.requests.sent(destination, self._correlation, now_ms)
        self.send(destination, build(self._correlation))

    def drain(self) -> RaftOutput:
        out, self.out = self.out, RaftOutput()
        return out

    def advance_high_watermark(self, offset: int) -> bool:
        if offset <= self.high_watermark:
            return False
        self.high_watermark = offset
        self.out.high_watermark = offset
        return True

    # --- leading ------------------------------------------------------------------------------
    def start_leading(self, epoch: int, granting: list[int], now_ms: int) -> None:
        """Lead ``epoch``: announce it (BeginQuorumEpoch, sent by the next poll) and open it with a
        LeaderChangeMessage, the record of its own epoch the high watermark must pass."""
        state = Leader(epoch, self.log.end_offset, dict.fromkeys(self.voters, -1),
                       check_quorum_deadline=now_ms + int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR),
                       begin_epoch_deadline=now_ms, unacked=set(self.voters - {self.node_id}))
        if not self.history.dynamic and self.node_id in self.voters and self.local.directory_id != ZERO_UUID:
            # Kafka's LeaderState at kraft.version 0: the static set, this leader's entry complete.
            state.volatile_voters = self.history.latest.with_node(self.local)
        self.set_state(state)
        message = LeaderChangeMessage(
            version=CONTROL_VALUE_VERSION, leader_id=self.node_id,
            voters=[LeaderChangeMessage.Voter(voter_id=v) for v in sorted(self.voters)],
            granting_voters=[LeaderChangeMessage.Voter(voter_id=v) for v in granting])
        values, types = [encode_control_value(message)], [LEADER_CHANGE]
        voters = self.history.latest
        # A dynamic quorum's first leader copies the bootstrap snapshot's voter set into the log (a
        # replica formatted without it learns it there), and any leader whose own endpoints or
        # kraft.version range the set lacks writes it updated (Kafka's appendStartOfEpochControlRecords).
        if self.history.dynamic and (self.history.latest_offset == BEFORE_LOG or voters.needs_update(self.local)):
            if self.local.node_id in voters.nodes:
                voters = updated(voters, self.local)
            values += [encode_control_value(KRaftVersionRecord(version=0, k_raft_version=self.history.kraft_version)),
                       encode_control_value(voters.to_record())]
            types += [ControlType.KRAFT_VERSION, ControlType.KRAFT_VOTERS]
        self.leader_append(state, tuple(values), True, now_ms, tuple(types))

    def leader_append(self, state: Leader, records: tuple[bytes, ...], control: bool, now_ms: int,
                      control_types: tuple[int, ...] = ()) -> None:
        self.appended(RaftBatch(self.log.end_offset, state.epoch, records, control, control_types=control_types))
        if self.node_id in state.voter_offsets:  # a leader removed from the voters counts no more
            state.voter_offsets[self.node_id] = self.log.end_offset
        if not self._update_leader_high_watermark(state, now_ms):
            self._answer_parked(state, now_ms, expired_only=False)  # they have records now

    def poll_leader(self, state: Leader, now_ms: int) -> None:
        if len(self.voters) > 1 and now_ms >= state.check_quorum_deadline:
            self.resign_after_check_quorum(state, now_ms)
            return
        if self.node_id not in self.voters and self.high_watermark > self.history.latest_offset:
            self.resign_after_check_quorum(state, now_ms)  # removed, and the removal is committed
            return
        self._answer_parked(state, now_ms, expired_only=True)
        if now_ms >= state.begin_epoch_deadline:
            state.begin_epoch_deadline = now_ms + self.config.fetch_timeout_ms // 2
            for voter in sorted(state.unacked):
                if self.requests.ready(voter, now_ms):
                    self.send_request(voter, now_ms, lambda cid: BeginQuorumEpochRequest(
                        correlation_id=cid, leader_id=self.node_id, leader_epoch=state.epoch))

    def _leader_only_error(self, current_leader_epoch: int) -> ErrorCode:
        """Kafka's validateLeaderOnlyRequest: the fetcher's epoch against ours, then whether we lead."""
        if current_leader_epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if current_leader_epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if not isinstance(self.state, Leader):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def on_fetch_request(self, sender: int, request: FetchRequest, now_ms: int) -> None:
        state = self.state
        error = self._leader_only_error(request.current_leader_epoch)
        if error is ErrorCode.NONE and (request.fetch_offset < 0 or request.last_fetched_epoch < 0):
            error = ErrorCode.INVALID_REQUEST
        if error is not ErrorCode.NONE or not isinstance(state, Leader):
            self.send(sender, self._fetch_answer(request, error))
            return
        snapshot = self._snapshot_for(request)
        if snapshot is not None:
            self.send(sender, self._fetch_answer(request, ErrorCode.NONE, snapshot=snapshot))
            return
        replica = request.replica_id
        voter = self.history.latest.is_voter(replica, request.replica_directory_id)
        if voter:
            self._heard_from_voter(state, replica, now_ms)
        diverging = self._diverging(request)
        if diverging is not None:
            self.send(sender, self._fetch_answer(request, ErrorCode.NONE, diverging))
            return
        fetcher = (replica, request.replica_directory_id)
        state.parked.pop(fetcher, None)
        state.progress.setdefault(replica, ReplicaProgress()).fetched(request.fetch_offset, self.log.end_offset, now_ms)
        state.progress[replica].directory_id = request.replica_directory_id
        moved = False
        if voter:
            state.voter_offsets[replica] = request.fetch_offset
            moved = self._update_leader_high_watermark(state, now_ms)
        else:
            state.observer_offsets[replica] = request.fetch_offset
        # KIP-1166: a fetcher behind the high watermark learns it now, not when the fetch would expire.
        behind = state.high_watermark_known and request.high_watermark < self.high_watermark
        if moved or behind or request.fetch_offset < self.log.end_offset:
            self.send(sender, self._fetch_answer(request, ErrorCode.NONE))
        else:
            state.parked[fetcher] = ParkedFetch(sender, request, now_ms + self.config.fetch_max_wait_ms)

    def _snapshot_for(self, request: FetchRequest) -> OffsetAndEpoch | None:
        """The snapshot a fetcher must load first (Kafka's tryCompleteFetchRequest and
        validateOffsetAndEpoch): an empty replica gets the latest snapshot rather than the whole log;
        a fetch before the log start, or at it with another epoch than the snapshot there, too."""
        latest = self.log.latest_snapshot()
        if request.fetch_offset == 0 and latest is not None and latest != BOOTSTRAP_SNAPSHOT:
            return latest
        start = self.log.start_offset
        if start == 0 and request.fetch_offset == 0:
            return None
        earliest = self.log.earliest_snapshot()
        if earliest is not None and (request.fetch_offset < start or request.last_fetched_epoch < earliest.epoch
                                     or (request.fetch_offset == start and request.last_fetched_epoch != earliest.epoch)):
            return latest
        return None

    def on_fetch_snapshot_request(self, sender: int, request: FetchSnapshotRequest, now_ms: int) -> None:
        """A slice of a snapshot for a fetcher loading it (Kafka's handleFetchSnapshotRequest)."""
        def answer(error: ErrorCode, size: int = -1, data: bytes = b"") -> None:
            found = error is ErrorCode.NONE
            self.send(sender, FetchSnapshotResponse(
                correlation_id=request.correlation_id, error_code=error, leader_id=self.leader_or_none(),
                leader_epoch=self.epoch, snapshot_id=request.snapshot_id if found else None, size=size,
                position=request.position if found else -1, data=data))
        state = self.state
        error = self._leader_only_error(request.current_leader_epoch)
        if error is not ErrorCode.NONE or not isinstance(state, Leader):
            answer(error)
            return
        snapshot = request.snapshot_id
        size = None if snapshot == BOOTSTRAP_SNAPSHOT else self.log.snapshot_size(snapshot)
        if size is None:
            answer(ErrorCode.SNAPSHOT_NOT_FOUND)
        elif not 0 <= request.position < size:
            answer(ErrorCode.POSITION_OUT_OF_RANGE)
        else:
            if self.history.latest.is_voter(request.replica_id, request.replica_directory_id):
                self._heard_from_voter(state, request.replica_id, now_ms)
            answer(ErrorCode.NONE, size, self.log.read_snapshot(snapshot, request.position, request.max_bytes))

    def describe_quorum(self, now_ms: int) -> DescribeQuorumResponse.PartitionData:
        """DescribeQuorum's answer for the partition: the leader's view of every voter and observer
        (times in the clock the driver passes as ``now_ms``); NOT_LEADER_OR_FOLLOWER elsewhere."""
        state = self.state
        answer = DescribeQuorumResponse.PartitionData(leader_id=self.leader_or_none(), leader_epoch=self.epoch,
                                                      high_watermark=self.high_watermark)
        if not isinstance(state, Leader):
            answer.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            return answer

        def replica(replica_id: int, end: int) -> DescribeQuorumResponse.ReplicaState:
            progress = state.progress.get(replica_id, ReplicaProgress())
            fetched, caught_up, directory = progress.last_fetch_ms, progress.last_caught_up_ms, progress.directory_id
            if replica_id == self.node_id:
                fetched = caught_up = now_ms
            # A voter's directory id as the voter set has it: none (zero) in a static set of
            # controller.quorum.voters, as Kafka's leader reports it.
            if replica_id in self.voters:
                directory = self.history.latest.directory_of(replica_id)
            elif replica_id == self.node_id:
                directory = self.directory_id
            return DescribeQuorumResponse.ReplicaState(replica_id=replica_id, replica_directory_id=directory,
                                                       log_end_offset=end, last_fetch_timestamp=fetched,
                                                       last_caught_up_timestamp=caught_up)
        answer.current_voters = [replica(v, state.voter_offsets[v]) for v in sorted(self.voters)]
        answer.observers = [replica(o, end) for o, end in sorted(state.observer_offsets.items())]
        return answer

    def _heard_from_voter(self, state: Leader, voter: int, now_ms: int) -> None:
        state.unacked.discard(voter)
        state.fetched_voters.add(voter)
        if len(state.fetched_voters | ({self.node_id} & self.voters)) > len(self.voters) // 2:
            state.fetched_voters.clear()
            state.check_quorum_deadline = now_ms + int(self.config.fetch_timeout_ms * CHECK_QUORUM_TIMEOUT_FACTOR)

    def _diverging(self, request: FetchRequest) -> OffsetAndEpoch | None:
        """The end of the leader's largest epoch at or below the fetcher's last fetched epoch, when
        the fetcher's log is not a prefix of the leader's there (ReplicatedLog.validateOffsetAndEpoch)."""
        if request.fetch_offset == 0 and self.log.start_offset == 0:
            return None
        end = self.log.epoch_end_offset(request.last_fetched_epoch)
        if end.epoch != request.last_fetched_epoch or end.offset < request.fetch_offset:
            return end
        return None

    def _update_leader_high_watermark(self, state: Leader, now_ms: int) -> bool:
        """The offset a majority of voters has (the leader counts), once it is past the start of
        this epoch: a leader exposes nothing before one record of its own epoch is committed."""
        offsets = sorted(state.voter_offsets.values(), reverse=True)
        majority_offset = offsets[len(offsets) // 2]
        if majority_offset <= state.epoch_start_offset:
            return False
        state.high_watermark_known = True
        if not self.advance_high_watermark(majority_offset):
            return False
        self._answer_parked(state, now_ms, expired_only=False)
        return True

    def _answer_parked(self, state: Leader, now_ms: int, expired_only: bool) -> None:
        for fetcher, parked in list(state.parked.items()):
            if not expired_only or now_ms >= parked.deadline:
                del state.parked[fetcher]
                self.send(parked.sender, self._fetch_answer(parked.request, ErrorCode.NONE))

    def _fetch_answer(self, request: FetchRequest, error: ErrorCode, diverging: OffsetAndEpoch | None = None,
                      snapshot: OffsetAndEpoch | None = None) -> FetchResponse:
        batches: tuple[RaftBatch, ...] = ()
        if error is ErrorCode.NONE and diverging is None and snapshot is None:
            batches = tuple(self.log.read(request.fetch_offset, self.config.fetch_max_records))
        state = self.state
        # A new leader's high watermark is unknown (-1, as Kafka's LeaderState answers) until a
        # record of its epoch is committed: Kafka's replicas refuse a high watermark that goes back.
        known = not isinstance(state, Leader) or state.high_watermark_known
        return FetchResponse(correlation_id=request.correlation_id, error_code=error,
                             leader_id=self.leader_or_none(), leader_epoch=self.epoch,
                             high_watermark=self.high_watermark if known else -1, batches=batches,
                             diverging_epoch=diverging, snapshot_id=snapshot)

