"""KRaft's Raft (KIP-595, pre-vote KIP-996) as a state machine without I/O.

``RaftNode`` is one replica of ``__cluster_metadata-0``: a voter, or an observer that only fetches.
It reads no clock and opens no socket. Its inputs are ``tick(now_ms)`` (timers), ``receive(sender,
message, now_ms)`` (a request, or the answer to one of its requests) and, on the leader,
``append(records, now_ms)`` and ``resign(now_ms)``. Each returns a RaftOutput: messages to send,
the quorum-state to persist, the log changes it made through its RaftLog, and a new high watermark.
The driver persists quorum-state and flushes the log before it sends the messages.

Kafka's rules, as KafkaRaftClient applies them:
- a vote is granted once per epoch, to a candidate whose log is at least as up to date (by last
  epoch, then end offset); a pre-vote changes nothing on the voter that answers it;
- the leader writes a LeaderChangeMessage at the start of its epoch and commits (advances the high
  watermark to the offset a majority of voters has fetched) only past that record, so nothing of an
  earlier epoch is exposed before a record of its own is on a majority; observers never count;
- a fetch whose (offset, last fetched epoch) is not in the leader's log is answered with the
  diverging epoch, and the follower truncates as for OffsetForLeaderEpoch;
- a fetch the leader's log cannot continue (an empty replica while a snapshot exists, an offset before
  the log start) is answered with the leader's latest snapshot id; the follower then fetches that
  snapshot with FetchSnapshot, chunk after chunk, replaces its log by it and fetches the log after it
  (RaftOutput.snapshot_loaded tells the driver to load the state from it).

Messages are the core's own (raft_messages); raft_wire turns them into Kafka's RPCs and back. The
voter set is static (controller.quorum.voters) or the dynamic quorum's latest in the log (voters.py,
KIP-853; raft_reconfig adds and removes voters).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

from grete.coordinator.kraft.quorum import QuorumState
from grete.coordinator.kraft.raft_log import RaftBatch, RaftLog, truncation_offset
from grete.coordinator.kraft.raft_messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LogTruncated,
    RaftMessage,
    RaftOutput,
    UpdateVoterResponse,
    VoteRequest,
    VoteResponse,
)
from grete.coordinator.kraft.raft_requests import RequestRole, successor_backoff
from grete.coordinator.kraft.raft_states import (
    Candidate,
    EpochState,
    Follower,
    Leader,
    Prospective,
    RaftConfig,
    Resigned,
    Tally,
    Unattached,
)
from grete.coordinator.kraft.voters import VoterHistory, VoterNode, VoterSet
from grete.protocol.errors import ErrorCode, KafkaError

__all__ = ["NEVER", "RETRY_BACKOFF_BASE_MS", "RaftConfig", "RaftNode"]

RETRY_BACKOFF_BASE_MS = 100  # the unit of the binary exponential election backoff (Kafka's)
NEVER = 2**62  # next_deadline when no timer runs
SNAPSHOT_CHUNK_BYTES = 8 * 1024 * 1024  # a FetchSnapshot's MaxBytes: Kafka's MAX_FETCH_SIZE_BYTES


class RaftNode(RequestRole):
    """One replica of the metadata quorum; see the module's description."""

    def __init__(self, node_id: int, voters: Iterable[int] | VoterHistory, log: RaftLog, stored: QuorumState,
                 now_ms: int, rng: random.Random, config: RaftConfig | None = None, local: VoterNode | None = None,
                 bootstrap: Sequence[int] = ()) -> None:
        """``voters``: a static quorum's ids, or the history a dynamic quorum's log starts from (its
        bootstrap snapshot's voter set). ``bootstrap``: the destinations an observer that knows no
        leader asks (controller.quorum.bootstrap.servers; the voters when empty)."""
        history = voters if isinstance(voters, VoterHistory) else VoterHistory(VoterSet.of_ids(voters))
        super().__init__(node_id, history, log, config or RaftConfig(), local)
        self.load_voter_history()
        self.bootstrap = tuple(bootstrap)
        self._rng = rng
        self._persisted = (stored.leader_id, stored.leader_epoch, stored.voted_id)
        self.state = self._initial_state(stored, now_ms)

    def _initial_state(self, stored: QuorumState, now_ms: int) -> EpochState:
        """Kafka's QuorumState.initialize: a leader restarts Resigned, a follower follows again."""
        def some(value: int) -> int | None:
            return value if value >= 0 else None
        deadline = self._election_deadline(now_ms)
        if self.log.last_epoch > stored.leader_epoch:  # quorum-state older than the log: no vote known
            return Unattached(self.log.last_epoch, None, deadline)
        epoch = max(stored.leader_epoch, 0)
        if stored.leader_id == self.node_id:
            return Resigned(epoch, (), set(), deadline)
        if stored.leader_id >= 0:
            timeout = self.config.fetch_timeout_ms
            return Follower(epoch, stored.leader_id, some(stored.voted_id), now_ms + timeout,
                            update_voter_due=now_ms + timeout)
        return Unattached(epoch, some(stored.voted_id), deadline)

    # --- inputs -----------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> RaftOutput:
        self._poll(now_ms)
        return self.drain()

    def receive(self, sender: int, message: RaftMessage, now_ms: int) -> RaftOutput:
        match message:
            case VoteRequest():
                self._on_vote_request(sender, message, now_ms)
            case BeginQuorumEpochRequest():
                self._on_begin_epoch_request(sender, message, now_ms)
            case EndQuorumEpochRequest():
                self._on_end_epoch_request(sender, message, now_ms)
            case FetchRequest():
                self.on_fetch_request(sender, message, now_ms)
            case FetchSnapshotRequest():
                self.on_fetch_snapshot_request(sender, message, now_ms)
            case _:
                self._on_response(sender, message, now_ms)
        self._poll(now_ms)
        return self.drain()

    def append(self, records: Sequence[bytes], now_ms: int) -> RaftOutput:
        """Append ``records`` as one batch of the leader's epoch (LogAppended in the output says
        where); NOT_LEADER_OR_FOLLOWER when this replica does not lead."""
        if not isinstance(self.state, Leader):
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader of the metadata quorum")
        self.leader_append(self.state, tuple(records), False, now_ms)
        self._poll(now_ms)
        return self.drain()

    def leader_gone(self, voter: int, now_ms: int) -> RaftOutput:
        """The driver saw the leader's process gone (its connection reset and its port refusing new
        ones: not a timeout, which a paused process or a slow network gives too). A voter following
        it starts a pre-vote round at once instead of waiting out controller.quorum.fetch.timeout.ms;
        an observer (a broker) forgets it and asks the voters, whose answers name the next leader.
        Safe as the timeout is: a voter that still hears from a live leader refuses the pre-vote."""
        state = self.state
        if isinstance(state, Follower) and state.leader_id == voter:
            self.requests.lost(voter, now_ms)
            if self.node_id in self.voters:
                # Every voter sees the same evidence at about the same moment: standing all at once
                # splits the vote (each a candidate for itself, another round after the backoff). So
                # as after the leader's EndQuorumEpoch: the first of the others stands at once, the
                # next ones later and later, and by then grant the first its votes.
                successors = tuple(sorted(v for v in self.voters if v != voter))
                state.fetch_deadline = now_ms + successor_backoff(self.node_id, successors, self.config.election_backoff_max_ms)
                state.has_fetched = False
            else:
                self._election_due(now_ms)
            self._poll(now_ms)
        return self.drain()

    def connection_failed(self, destination: int, now_ms: int) -> RaftOutput:
        """A request could not be sent (the connection was refused or ended before an answer). An
        observer asking the voters for the leader tries the next one after the retry backoff rather
        than waiting out the request timeout: when the leader has just died, the voter it asked may
        be that leader. A voter keeps the request timeout (its peers are retried at that pace)."""
        if self.node_id not in self.voters:
            self.requests.lost(destination, now_ms)
            self._poll(now_ms)
        return self.drain()

    def resign(self, now_ms: int) -> RaftOutput:
        """Step down gracefully: EndQuorumEpoch to the voters, most caught-up successors first."""
        if isinstance(self.state, Leader):
            self._become_resigned(self.state, now_ms)
            self._poll(now_ms)
        return self.drain()

    def next_deadline(self, now_ms: int) -> int:
        """The earliest time ``tick`` has something to do (a timer of the state, a request timing
        out or its retry backoff ending, a parked fetch's max wait): the driver sleeps until then,
        or until a message or an append arrives, and never polls."""
        state = self.state
        request_deadline = self.requests.next_deadline(now_ms)
        times = [] if request_deadline is None else [request_deadline]
        if request_deadline is None and self._sends_when_idle():
            return 0  # a request to send and none in flight: due now
        if isinstance(state, Leader):
            if len(self.voters) > 1:
                times.append(state.check_quorum_deadline)
            if state.unacked:
                times.append(state.begin_epoch_deadline)
            times.extend(parked.deadline for parked in state.parked.values())
        elif isinstance(state, Candidate):
            times.append(state.backoff_until if state.backoff_until is not None else state.election_deadline)
        elif isinstance(state, Follower):
            times.append(state.fetch_deadline)
        elif isinstance(state, Unattached):
            if self.node_id in self.voters:
                times.append(state.election_deadline)
        else:
            times.append(state.election_deadline)
        return min(times, default=NEVER)

    def _sends_when_idle(self) -> bool:
        """Whether this state keeps a request in flight at all times (a follower's or an observer's
        fetch, a round's votes still unanswered)."""
        state = self.state
        if isinstance(state, Follower):
            return True
        if isinstance(state, Unattached):
            return self.node_id not in self.voters
        if isinstance(state, Prospective):
            return bool(state.tally.unanswered())
        if isinstance(state, Candidate):
            return state.backoff_until is None and bool(state.tally.unanswered())
        return False

    # --- requests ---------------------------------------------------------------------------------
    # --- responses --------------------------------------------------------------------------------
    def _on_response(self, sender: int, response: RaftMessage, now_ms: int) -> None:
        assert isinstance(response, VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse
                          | FetchResponse | FetchSnapshotResponse | UpdateVoterResponse)
        failed = response.error_code is not ErrorCode.NONE
        if not self.requests.answered(sender, response.correlation_id, now_ms, failed):
            return  # the answer to a request this state no longer waits for
        if response.leader_id >= 0 or response.leader_epoch > self.epoch:
            leader = response.leader_id if response.leader_id >= 0 else None
            if self._follow(leader, response.leader_epoch, now_ms, from_leader=False):
                if not isinstance(response, FetchResponse) or failed:
                    return
        state = self.state
        if isinstance(response, VoteResponse):
            if isinstance(state, Prospective | Candidate) and response.leader_epoch <= state.epoch:
                state.tally.record(sender, response.vote_granted and not failed)
                self._count_votes(state, now_ms)
        elif isinstance(response, BeginQuorumEpochResponse):
            if isinstance(state, Leader) and not failed:
                state.unacked.discard(sender)
        elif isinstance(response, EndQuorumEpochResponse):
            if isinstance(state, Resigned) and not failed:
                state.unacked.discard(sender)
        elif not (isinstance(state, Follower) and state.leader_id == sender and response.leader_epoch == state.epoch):
            return
        elif isinstance(response, UpdateVoterResponse):
            self.voter_update_answered(state, response, now_ms)
        elif isinstance(response, FetchSnapshotResponse):
            self._on_fetch_snapshot_response(state, response, now_ms)
        elif not failed:
            self._on_fetch_response(state, response, now_ms)

    def _count_votes(self, state: Prospective | Candidate, now_ms: int) -> None:
        if isinstance(state, Prospective):
            if state.tally.won:
                self._become_candidate(state, now_ms)
            elif state.tally.lost:
                self._prospective_lost(state, now_ms)
        elif state.backoff_until is None:
            if state.tally.won:
                self._become_leader(state, now_ms)
            elif state.tally.lost:
                state.backoff_until = now_ms + election_backoff(self._rng, state.retries, self.config.election_backoff_max_ms)

    def _on_fetch_response(self, state: Follower, response: FetchResponse, now_ms: int) -> None:
        state.fetch_deadline = now_ms + self.config.fetch_timeout_ms
        state.has_fetched = True
        if response.diverging_epoch is not None:
            self.truncated(truncation_offset(self.log, response.diverging_epoch))
            return
        if response.snapshot_id is not None:
            state.fetching_snapshot, state.snapshot_position = response.snapshot_id, 0
            return
        for batch in response.batches:
            end = self.log.end_offset
            if batch.next_offset <= end:
                continue
            if batch.base_offset > end:
                break  # not contiguous: never from a leader that validated our fetch offset
            skip = end - batch.base_offset
            if skip:
                batch = RaftBatch(end, batch.epoch, batch.records[skip:], batch.control,
                                  control_types=batch.control_types[skip:])
            self.appended(batch)
        self.advance_high_watermark(min(response.high_watermark, self.log.end_offset))

    def _on_fetch_snapshot_response(self, state: Follower, response: FetchSnapshotResponse, now_ms: int) -> None:
        """A chunk of the snapshot being fetched (Kafka's handleFetchSnapshotResponse); once whole,
        the log is replaced by it. A snapshot the leader no longer has is given up: the next fetch
        learns which one to load now."""
        state.fetch_deadline = now_ms + self.config.fetch_timeout_ms
        wanted = state.fetching_snapshot
        if (wanted is None or response.error_code is not ErrorCode.NONE or response.snapshot_id != wanted
                or response.position != state.snapshot_position):
            state.fetching_snapshot, state.snapshot_position = None, 0
            return
        state.snapshot_position = self.log.write_snapshot_chunk(wanted, response.position, response.data)
        if state.snapshot_position < response.size:
            return
        self.log.freeze_snapshot(wanted)
        state.fetching_snapshot, state.snapshot_position = None, 0
        if self.log.truncate_to_latest_snapshot():
            self.history.truncate(wanted.offset)
            self.out.log_changes.append(LogTruncated(wanted.offset))
            self.out.snapshot_loaded = wanted
            self.advance_high_watermark(wanted.offset)

    # --- timers and sending -----------------------------------------------------------------------
    def _poll(self, now_ms: int) -> None:
        """Act on the timers; a state entered on the way acts at once too (its first requests)."""
        while True:
            state = self.state
            self._poll_state(now_ms)
            if self.state is state:
                return

    def _poll_state(self, now_ms: int) -> None:
        state = self.state
        if isinstance(state, Leader):
            self.poll_leader(state, now_ms)
        elif isinstance(state, Candidate):
            self._poll_candidate(state, now_ms)
        elif isinstance(state, Prospective):
            if now_ms >= state.election_deadline:
                self._prospective_lost(state, now_ms)
            else:
                self._send_votes(state, now_ms)
        elif isinstance(state, Follower):
            if now_ms >= state.fetch_deadline:
                self._election_due(now_ms)
            elif self.requests.ready(state.leader_id, now_ms):
                if self.voter_update_due(state, now_ms):
                    self.send_voter_update(state, now_ms)
                elif state.fetching_snapshot is not None:
                    self._send_fetch_snapshot(state, now_ms)
                else:
                    self._send_fetch(state.leader_id, now_ms)
        elif isinstance(state, Unattached):
            if self.node_id not in self.voters:
                self._observer_fetch(now_ms)
            elif now_ms >= state.election_deadline:
                self._become_prospective(1, now_ms)
        else:
            self._poll_resigned(state, now_ms)

    def _poll_candidate(self, state: Candidate, now_ms: int) -> None:
        if state.backoff_until is not None:
            if now_ms >= state.backoff_until:
                self._become_prospective(state.retries + 1, now_ms)
        elif now_ms >= state.election_deadline:
            state.backoff_until = now_ms + election_backoff(self._rng, state.retries, self.config.election_backoff_max_ms)
        else:
            self._send_votes(state, now_ms)

    def _poll_resigned(self, state: Resigned, now_ms: int) -> None:
        if now_ms >= state.election_deadline:
            if self.node_id in self.voters:
                self._become_candidate(None, now_ms)
            else:
                self._become_unattached(state.epoch + 1, None, now_ms)
            return
        for voter in sorted(state.unacked):
            if self.requests.ready(voter, now_ms):
                self.send_request(voter, now_ms, lambda cid: EndQuorumEpochRequest(
                    correlation_id=cid, leader_id=self.node_id, leader_epoch=state.epoch,
                    preferred_successors=state.preferred_successors))

    def _send_votes(self, state: Prospective | Candidate, now_ms: int) -> None:
        pre_vote = isinstance(state, Prospective)
        epoch = state.epoch + 1 if pre_vote else state.epoch
        for voter in state.tally.unanswered():
            if self.requests.ready(voter, now_ms):
                self.send_request(voter, now_ms, lambda cid: VoteRequest(
                    correlation_id=cid, candidate_epoch=epoch, candidate_id=self.node_id,
                    candidate_directory_id=self.directory_id,
                    last_offset_epoch=self.log.last_epoch, last_offset=self.log.end_offset, pre_vote=pre_vote))

    def _send_fetch(self, destination: int, now_ms: int) -> None:
        self.send_request(destination, now_ms, lambda cid: FetchRequest(
            correlation_id=cid, replica_id=self.node_id, replica_directory_id=self.directory_id,
            current_leader_epoch=self.epoch, fetch_offset=self.log.end_offset,
            last_fetched_epoch=self.log.last_epoch, high_watermark=self.high_watermark))

    def _send_fetch_snapshot(self, state: Follower, now_ms: int) -> None:
        snapshot = state.fetching_snapshot
        assert snapshot is not None
        self.send_request(state.leader_id, now_ms, lambda cid: FetchSnapshotRequest(
            correlation_id=cid, replica_id=self.node_id, replica_directory_id=self.directory_id,
            current_leader_epoch=self.epoch, snapshot_id=snapshot, position=state.snapshot_position,
            max_bytes=SNAPSHOT_CHUNK_BYTES))

    def _observer_fetch(self, now_ms: int) -> None:
        """An observer that knows no leader asks a random bootstrap server (or voter), whose answer
        names the leader."""
        candidates = sorted(self.bootstrap or self.voters)
        if candidates and not self.requests.any_inflight(now_ms):
            destination = self._rng.choice(candidates)
            if self.requests.ready(destination, now_ms):
                self._send_fetch(destination, now_ms)

    def _election_due(self, now_ms: int) -> None:
        """A follower's leader went quiet: a voter starts a pre-vote round, an observer forgets it."""
        if self.node_id in self.voters:
            self._become_prospective(1, now_ms)
        else:
            self._become_unattached(self.epoch, None, now_ms)

    def _election_deadline(self, now_ms: int) -> int:
        """Kafka randomizes the election timeout between once and twice the configured value."""
        timeout = self.config.election_timeout_ms
        return now_ms + timeout + self._rng.randrange(timeout)

    # --- transitions ------------------------------------------------------------------------------
    def _follow(self, leader: int | None, epoch: int, now_ms: int, from_leader: bool) -> bool:
        """Kafka's maybeTransition on a message naming a leader and an epoch: a newer epoch is
        joined (following its leader if named); a leader of our own epoch is followed unless we
        know one already (or, when the leader itself speaks, unless we follow it)."""
        state = self.state
        if epoch > state.epoch:
            if leader is None or leader == self.node_id:
                self._become_unattached(epoch, None, now_ms)
            else:
                self._become_follower(epoch, leader, None, now_ms)
            return True
        if epoch < state.epoch or leader is None or leader == self.node_id:
            return False
        if isinstance(state, Leader | Resigned | Follower):
            return False
        if isinstance(state, Prospective) and state.leader_id is not None and not from_leader:
            return False
        self._become_follower(epoch, leader, self.voted_for(), now_ms)
        return True

    def _become_unattached(self, epoch: int, voted: int | None, now_ms: int) -> None:
        self.set_state(Unattached(epoch, voted, self._election_deadline(now_ms)))

    def _become_follower(self, epoch: int, leader: int, voted: int | None, now_ms: int) -> None:
        timeout = self.config.fetch_timeout_ms
        self.set_state(Follower(epoch, leader, voted, now_ms + timeout, update_voter_due=now_ms + timeout))

    def _become_prospective(self, retries: int, now_ms: int) -> None:
        state = self.state
        leader = state.leader_id if isinstance(state, Follower) else None
        tally = Tally(self.voters, {self.node_id})
        prospective = Prospective(state.epoch, self.voted_for(), leader, retries,
                                  self._election_deadline(now_ms), tally)
        self.set_state(prospective)
        self._count_votes(prospective, now_ms)

    def _prospective_lost(self, state: Prospective, now_ms: int) -> None:
        if state.leader_id is not None:
            self._become_follower(state.epoch, state.leader_id, state.voted_id, now_ms)
        else:
            self._become_unattached(state.epoch, state.voted_id, now_ms)

    def _become_candidate(self, state: Prospective | None, now_ms: int) -> None:
        retries = state.retries if state is not None else 1
        candidate = Candidate(self.epoch + 1, retries, self._election_deadline(now_ms),
                              Tally(self.voters, {self.node_id}))
        self.set_state(candidate)
        self._count_votes(candidate, now_ms)

    def _become_leader(self, state: Candidate, now_ms: int) -> None:
        self.start_leading(state.epoch, sorted(state.tally.granted), now_ms)

    def _become_resigned(self, state: Leader, now_ms: int) -> None:
        successors = tuple(sorted((v for v in self.voters if v != self.node_id),
                                  key=lambda v: (-state.voter_offsets.get(v, -1), v)))
        self.set_state(Resigned(state.epoch, successors, set(successors), self._election_deadline(now_ms)))

    def resign_after_check_quorum(self, state: Leader, now_ms: int) -> None:
        self._become_resigned(state, now_ms)


def election_backoff(rng: random.Random, retries: int, maximum: int) -> int:
    """Binary exponential backoff with jitter, capped at controller.quorum.election.backoff.max.ms."""
    jitter = rng.randrange(2 << min(20, retries - 1))
    return min(RETRY_BACKOFF_BASE_MS * jitter, maximum)
