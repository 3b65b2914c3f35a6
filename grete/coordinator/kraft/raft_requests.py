"""The requests a KRaft replica answers as a voter: Vote (and KIP-996's pre-vote), BeginQuorumEpoch
and EndQuorumEpoch; the transitions they cause are the replica's own (raft.RaftNode)."""

from __future__ import annotations

from abc import abstractmethod

from grete.coordinator.kraft.raft_log import OffsetAndEpoch
from grete.coordinator.kraft.raft_messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    VoteRequest,
    VoteResponse,
)
from grete.coordinator.kraft.raft_reconfig import ReconfigRole
from grete.coordinator.kraft.raft_states import Candidate, Follower, Leader, Prospective, Resigned
from grete.protocol.errors import ErrorCode


class RequestRole(ReconfigRole):
    @abstractmethod
    def _become_unattached(self, epoch: int, voted: int | None, now_ms: int) -> None: ...

    @abstractmethod
    def _follow(self, leader: int | None, epoch: int, now_ms: int, from_leader: bool) -> bool: ...

    def _on_vote_request(self, sender: int, request: VoteRequest, now_ms: int) -> None:
        def answer(error: ErrorCode, granted: bool) -> None:
            self.send(sender, VoteResponse(correlation_id=request.correlation_id, error_code=error,
                                           leader_id=self.leader_or_none(), leader_epoch=self.epoch,
                                           vote_granted=granted))
        if self.node_id not in self.voters:
            return answer(ErrorCode.INCONSISTENT_VOTER_SET, False)
        if not request.pre_vote and request.candidate_epoch > self.epoch:
            self._become_unattached(request.candidate_epoch, None, now_ms)
        if request.candidate_epoch < self.epoch:
            return answer(ErrorCode.FENCED_LEADER_EPOCH, False)
        theirs = OffsetAndEpoch(request.last_offset_epoch, request.last_offset)
        up_to_date = theirs >= OffsetAndEpoch(self.log.last_epoch, self.log.end_offset)
        # A dynamic quorum's voter set may be behind the candidate's, so only a static one refuses a
        # candidate it does not list (Kafka 4 grants by the log alone).
        known = self.history.dynamic or self.history.latest.is_voter(request.candidate_id, request.candidate_directory_id)
        granted = known and self._can_grant(
            request.candidate_id, up_to_date, request.pre_vote)
        if granted and not request.pre_vote and self.voted_for() != request.candidate_id:
            self._become_unattached(self.epoch, request.candidate_id, now_ms)  # persisted before the answer
        return answer(ErrorCode.NONE, granted)

    def _can_grant(self, candidate: int, up_to_date: bool, pre_vote: bool) -> bool:
        state = self.state
        if isinstance(state, Leader):
            return False
        if isinstance(state, Candidate):
            return up_to_date if pre_vote else candidate == self.node_id
        if isinstance(state, Follower):  # only pre-votes, and only once the leader went quiet
            return pre_vote and up_to_date and not state.has_fetched
        if isinstance(state, Resigned):  # a resigning leader helps its successors' pre-votes
            return pre_vote and up_to_date
        if pre_vote:
            return up_to_date
        if state.voted_id is not None:
            return state.voted_id == candidate
        if isinstance(state, Prospective) and state.leader_id is not None:
            return False
        return up_to_date

    def _on_begin_epoch_request(self, sender: int, request: BeginQuorumEpochRequest, now_ms: int) -> None:
        if request.leader_epoch >= self.epoch:
            self._follow(request.leader_id, request.leader_epoch, now_ms, from_leader=True)
        error = ErrorCode.FENCED_LEADER_EPOCH if request.leader_epoch < self.epoch else ErrorCode.NONE
        self.send(sender, BeginQuorumEpochResponse(correlation_id=request.correlation_id, error_code=error,
                                                   leader_id=self.leader_or_none(), leader_epoch=self.epoch))

    def _on_end_epoch_request(self, sender: int, request: EndQuorumEpochRequest, now_ms: int) -> None:
        error = ErrorCode.FENCED_LEADER_EPOCH if request.leader_epoch < self.epoch else ErrorCode.NONE
        if error is ErrorCode.NONE:
            self._follow(request.leader_id, request.leader_epoch, now_ms, from_leader=True)
            state = self.state
            if isinstance(state, Follower) and state.leader_id == request.leader_id:
                # The most caught-up successor stands at once, the others later and later.
                backoff = successor_backoff(self.node_id, request.preferred_successors,
                                            self.config.election_backoff_max_ms)
                state.fetch_deadline = now_ms + backoff
                state.has_fetched = False
        self.send(sender, EndQuorumEpochResponse(correlation_id=request.correlation_id, error_code=error,
                                                 leader_id=self.leader_or_none(), leader_epoch=self.epoch))


def successor_backoff(node_id: int, successors: tuple[int, ...], maximum: int) -> int:
    """Kafka's strict exponential backoff by rank among the preferred successors."""
    if node_id not in successors:
        return maximum
    position = successors.index(node_id)
    if position == 0:
        return 0
    base = maximum >> (len(successors) - 1)
    return min(maximum, base << (position - 1))
