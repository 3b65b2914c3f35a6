"""The epoch states of a KRaft replica, as Kafka names them, and the bookkeeping they share.

A replica is always in exactly one state, for one epoch:
- Unattached: knows no leader for the epoch (it may have voted in it); a voter starts a pre-vote
  round when its election timer expires.
- Prospective (KIP-996): asks the voters whether they would vote for it, without bumping the epoch;
  remembers the leader it was following, if any, to go back to when the round fails.
- Candidate: voted for itself in a bumped epoch and asks the voters for theirs; after losing or
  timing out it backs off (binary exponential with jitter) and starts a new pre-vote round.
- Leader: appends, serves fetches, advances the high watermark.
- Follower: fetches from the epoch's leader; a fetch timeout starts a pre-vote round.
- Resigned: a leader that stepped down (gracefully, or because a majority stopped fetching);
  it tells the voters (EndQuorumEpoch) and stands for election again after an election timeout.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from grete.coordinator.kraft.raft_log import OffsetAndEpoch
from grete.coordinator.kraft.raft_messages import FetchRequest
from grete.coordinator.kraft.voters import VoterSet
from grete.protocol.codec import ZERO_UUID


@dataclass(slots=True)
class Tally:
    """The answers to one (pre-)vote round; the replica asking has granted itself."""

    voters: frozenset[int]
    granted: set[int]
    rejected: set[int] = field(default_factory=set)

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1

    def record(self, voter: int, granted: bool) -> None:
        if voter in self.voters and voter not in self.granted | self.rejected:
            (self.granted if granted else self.rejected).add(voter)

    @property
    def won(self) -> bool:
        return len(self.granted) >= self.majority

    @property
    def lost(self) -> bool:
        """No majority can be reached any more (Kafka's isVoteRejected)."""
        return len(self.voters) - len(self.rejected) < self.majority

    def unanswered(self) -> list[int]:
        return sorted(self.voters - self.granted - self.rejected)


@dataclass(slots=True)
class Unattached:
    epoch: int
    voted_id: int | None
    election_deadline: int


@dataclass(slots=True)
class Prospective:
    epoch: int
    voted_id: int | None
    leader_id: int | None  # the leader followed before the fetch timeout, if any
    retries: int
    election_deadline: int
    tally: Tally


@dataclass(slots=True)
class Candidate:
    epoch: int
    retries: int
    election_deadline: int
    tally: Tally
    backoff_until: int | None = None


@dataclass(slots=True)
class Follower:
    epoch: int
    leader_id: int
    voted_id: int | None
    fetch_deadline: int
    # A follower that has heard from its leader in this epoch refuses pre-votes (KIP-996).
    has_fetched: bool = False
    # The leader's snapshot being fetched (FetchSnapshot instead of Fetch until it is whole), and
    # how many of its bytes are here.
    fetching_snapshot: OffsetAndEpoch | None = None
    snapshot_position: int = 0
    # KIP-853: a voter tells each new leader its endpoints and kraft.version range (UpdateRaftVoter)
    # once a fetch timeout into following it, and again a period later while the leader has not taken it.
    update_voter_due: int = 0
    updated_leader: bool = False


@dataclass(slots=True)
class ParkedFetch:
    """A fetch with nothing to return yet, answered when the log or the high watermark moves or
    when it has waited ``fetch_max_wait_ms`` (the long poll of Kafka's fetch purgatory)."""

    sender: int
    request: FetchRequest
    deadline: int


@dataclass(slots=True)
class ReplicaProgress:
    """How a replica fetches from the leader: DescribeQuorum's last fetch and last caught-up times."""

    last_fetch_ms: int = -1
    last_fetch_leader_end: int = -1  # the leader's end offset at that fetch
    last_caught_up_ms: int = -1
    directory_id: uuid.UUID = ZERO_UUID  # the one its last fetch named (AddRaftVoter checks it)

    def fetched(self, fetch_offset: int, leader_end: int, now_ms: int) -> None:
        """Caught up now if it fetched from the leader's end; caught up at its previous fetch if it
        has since reached the end the leader had then (Kafka's LeaderState.ReplicaState)."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif self.last_fetch_leader_end > 0 and fetch_offset >= self.last_fetch_leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.last_fetch_leader_end = leader_end
        self.last_fetch_ms = max(self.last_fetch_ms, now_ms)


@dataclass(slots=True)
class Leader:
    epoch: int
    epoch_start_offset: int  # where its LeaderChangeMessage is
    voter_offsets: dict[int, int]  # replicated end offset per voter (-1: not known yet)
    check_quorum_deadline: int
    begin_epoch_deadline: int
    unacked: set[int]  # voters that have not acknowledged the epoch (BeginQuorumEpoch)
    observer_offsets: dict[int, int] = field(default_factory=dict)
    fetched_voters: set[int] = field(default_factory=set)
    # by replica id and directory id: two processes started with one node.id (an operator's mistake)
    # each keep their own, so the one the controller refused cannot starve the other
    parked: dict[tuple[int, uuid.UUID], ParkedFetch] = field(default_factory=dict)
    progress: dict[int, ReplicaProgress] = field(default_factory=dict)
    # Whether a record of this epoch is committed: until then the leader does not know the high
    # watermark (what it learned as a follower may be below what others have seen) and reports -1.
    high_watermark_known: bool = False
    # A static quorum's (kraft.version 0) voters as UpdateRaftVoter told them, in memory only:
    # what an upgrade to kraft.version 1 writes (Kafka's volatile voter set); None once upgraded.
    volatile_voters: VoterSet | None = None


@dataclass(slots=True)
class Resigned:
    epoch: int
    preferred_successors: tuple[int, ...]
    unacked: set[int]  # voters not yet told (EndQuorumEpoch)
    election_deadline: int


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """controller.quorum.* settings, with Kafka's defaults."""

    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # replica.fetch.wait.max.ms: how long a leader parks an empty fetch
    fetch_max_records: int = 1000  # records per fetch answer (Kafka bounds bytes: 8 MiB)


EpochState = Unattached | Prospective | Candidate | Leader | Follower | Resigned


class RequestManager:
    """One outstanding request per destination: a request gets its answer, times out
    (controller.quorum.request.timeout.ms), or is retried after controller.quorum.retry.backoff.ms
    when answered with an error; answers to anything else are ignored."""

    def __init__(self, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._inflight: dict[int, tuple[int, int]] = {}  # destination -> (correlation id, deadline)
        self._backoff: dict[int, int] = {}  # destination -> retry time

    def ready(self, destination: int, now_ms: int) -> bool:
        inflight = self._inflight.get(destination)
        if inflight is not None:
            if now_ms < inflight[1]:
                return False
            del self._inflight[destination]
        return self._backoff.get(destination, 0) <= now_ms

    def next_deadline(self, now_ms: int) -> int | None:
        """When an in-flight request times out or a backoff ends, whichever is first. Those already
        past are forgotten (as ``ready`` forgets them): a state that sends nothing to that destination
        any more must not be woken for them again and again."""
        self._inflight = {d: entry for d, entry in self._inflight.items() if entry[1] > now_ms}
        self._backoff = {d: until for d, until in self._backoff.items() if until > now_ms}
        times = [deadline for _, deadline in self._inflight.values()] + list(self._backoff.values())
        return min(times) if times else None

    def any_inflight(self, now_ms: int) -> bool:
        return any(now_ms < deadline for _, deadline in self._inflight.values())

    def sent(self, destination: int, correlation_id: int, now_ms: int) -> None:
        self._inflight[destination] = (correlation_id, now_ms + self.request_timeout_ms)
        self._backoff.pop(destination, None)

    def answered(self, destination: int, correlation_id: int, now_ms: int, failed: bool) -> bool:
        """Whether this is the answer awaited from ``destination``; a failed one delays the retry."""
        inflight = self._inflight.get(destination)
        if inflight is None or inflight[0] != correlation_id:
            return False
        del self._inflight[destination]
        if failed:
            self._backoff[destination] = now_ms + self.retry_backoff_ms
        return True

    def lost(self, destination: int, now_ms: int) -> None:
        """The connection to ``destination`` ended: what was in flight there will not be answered;
        tried again after the retry backoff."""
        if self._inflight.pop(destination, None) is not None:
            self._backoff[destination] = now_ms + self.retry_backoff_ms

    def reset(self) -> None:
        self._inflight.clear()
        self._backoff.clear()
