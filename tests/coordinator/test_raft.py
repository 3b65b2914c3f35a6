"""KRaft's Raft core rule by rule: votes and pre-votes, elections and their timers, fetch-based
replication with diverging epochs, the high watermark, resignation."""

from __future__ import annotations

import random
import uuid

import pytest

from grete.coordinator.kraft.quorum import QuorumState
from grete.coordinator.kraft.raft import RaftConfig, RaftNode
from grete.coordinator.kraft.raft_log import InMemoryRaftLog, OffsetAndEpoch, RaftBatch, truncation_offset
from grete.coordinator.kraft.raft_messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchResponse,
    LogAppended,
    LogTruncated,
    RaftMessage,
    RaftOutput,
    VoteRequest,
    VoteResponse,
)
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import LeaderChangeMessage
from grete.protocol.metadata_frame import decode_control_value
from grete.protocol.records.control import ControlType

CONFIG = RaftConfig()  # Kafka's defaults: election 1000 ms, fetch 2000 ms, backoff max 1000 ms
VOTERS = (1, 2, 3)


def log_of(*epochs: int, start: int = 0) -> InMemoryRaftLog:
    """A log with one record per epoch given."""
    log = InMemoryRaftLog(start)
    for epoch in epochs:
        log.append(RaftBatch(log.end_offset, epoch, (b"r%d" % log.end_offset,)))
    return log


def node(node_id: int = 1, log: InMemoryRaftLog | None = None, stored: QuorumState | None = None,
         voters: tuple[int, ...] = VOTERS, now: int = 0) -> RaftNode:
    return RaftNode(node_id, voters, log if log is not None else InMemoryRaftLog(), stored or QuorumState(),
                    now, random.Random(0), CONFIG)


def vote(candidate: int, epoch: int, last_epoch: int, end: int, pre_vote: bool = False, cid: int = 7) -> VoteRequest:
    return VoteRequest(correlation_id=cid, candidate_epoch=epoch, candidate_id=candidate,
                       last_offset_epoch=last_epoch, last_offset=end, pre_vote=pre_vote)


def sent(out: RaftOutput, kind: type[RaftMessage]) -> list[tuple[int, RaftMessage]]:
    return [(to, m) for to, m in out.messages if isinstance(m, kind)]


def only(out: RaftOutput, kind: type[RaftMessage]) -> RaftMessage:
    messages = sent(out, kind)
    assert len(messages) == 1, out.messages
    return messages[0][1]


def answer_votes(candidate: RaftNode, out: RaftOutput, granted: bool, now: int) -> RaftOutput:
    """Every voter asked answers the (pre-)vote requests in ``out``; what the answers made the
    candidate do, together."""
    result = RaftOutput()
    for voter, request in sent(out, VoteRequest):
        assert isinstance(request, VoteRequest)
        step = candidate.receive(voter, VoteResponse(correlation_id=request.correlation_id, error_code=ErrorCode.NONE,
                                                       leader_id=-1, leader_epoch=candidate.epoch,
                                                       vote_granted=granted), now)
        result.messages += step.messages
        result.log_changes += step.log_changes
        result.quorum_state = step.quorum_state or result.quorum_state
        result.high_watermark = step.high_watermark or result.high_watermark
    return result


def elect(leader: RaftNode, now: int = 0) -> RaftOutput:
    """Take ``leader`` through a pre-vote round and an election that every voter grants."""
    out = leader.tick(now + 2 * CONFIG.election_timeout_ms)
    assert leader.role == "Prospective"
    out = answer_votes(leader, out, True, now)
    assert leader.role == "Candidate"
    out = answer_votes(leader, out, True, now)
    assert leader.role == "Leader"
    return out


# --- votes ------------------------------------------------------------------------------------------

def test_a_vote_is_granted_to_an_up_to_date_candidate_and_persisted_with_the_answer() -> None:
    voter = node(2, log_of(1, 1))
    out = voter.receive(1, vote(1, 3, last_epoch=1, end=2), 0)
    response = only(out, VoteResponse)
    assert isinstance(response, VoteResponse) and response.vote_granted and response.leader_epoch == 3
    assert out.quorum_state == QuorumState(-1, 3, 1)
    assert (voter.role, voter.epoch) == ("Unattached", 3)


@pytest.mark.parametrize(("last_epoch", "end"), [(1, 1), (0, 5)], ids=["shorter log", "older last epoch"])
def test_a_vote_is_refused_to_a_candidate_whose_log_is_behind(last_epoch: int, end: int) -> None:
    voter = node(2, log_of(1, 1))
    out = voter.receive(1, vote(1, 3, last_epoch, end), 0)
    response = only(out, VoteResponse)
    assert isinstance(response, VoteResponse) and not response.vote_granted
    assert out.quorum_state == QuorumState(-1, 3, -1)  # the epoch is joined all the same


def test_a_candidate_with_a_later_last_epoch_wins_over_a_longer_log() -> None:
    voter = node(2, log_of(1, 1, 1))
    response = only(voter.receive(1, vote(1, 3, last_epoch=2, end=1), 0), VoteResponse)
    assert isinstance(response, VoteResponse) and response.vote_granted


def test_one_vote_per_epoch_and_it_survives_a_restart() -> None:
    voter = node(2)
    out = voter.receive(1, vote(1, 3, 0, 0), 0)
    assert out.quorum_state is not None
    again = only(voter.receive(1, vote(1, 3, 0, 0, cid=8), 0), VoteResponse)
    assert isinstance(again, VoteResponse) and again.vote_granted  # the same candidate asking twice
    other = only(voter.receive(3, vote(3, 3, 0, 0), 0), VoteResponse)
    assert isinstance(other, VoteResponse) and not other.vote_granted
    restarted = node(2, stored=out.quorum_state)
    after = only(restarted.receive(3, vote(3, 3, 0, 0), 0), VoteResponse)
    assert isinstance(after, VoteResponse) and not after.vote_granted


def test_a_vote_from_an_older_epoch_is_fenced() -> None:
    voter = node(2, stored=QuorumState(-1, 5, -1))
    out = voter.receive(1, vote(1, 4, 9, 9), 0)
    response = only(out, VoteResponse)
    assert isinstance(response, VoteResponse)
    assert (response.error_code, response.vote_granted, response.leader_epoch) == (ErrorCode.FENCED_LEADER_EPOCH, False, 5)
    assert out.quorum_state is None


def test_a_leader_and_a_follower_of_a_live_leader_refuse_votes_of_their_epoch() -> None:
    follower = node(2, stored=QuorumState(3, 4, -1))
    response = only(follower.receive(1, vote(1, 4, 9, 9), 0), VoteResponse)
    assert isinstance(response, VoteResponse) and not response.vote_granted and response.leader_id == 3


# --- pre-votes ----------------------------------------------------------------------------------------

def test_a_pre_vote_changes_nothing_on_the_voter() -> None:
    voter = node(2, log_of(1), stored=QuorumState(-1, 1, -1))
    out = voter.receive(1, vote(1, 6, last_epoch=1, end=1, pre_vote=True), 0)
    response = only(out, VoteResponse)
    assert isinstance(response, VoteResponse) and response.vote_granted
    assert (voter.role, voter.epoch, voter.voted_for()) == ("Unattached", 1, None)
    assert out.quorum_state is None and not out.leader_changed
    # and it does not stand in the way of a real vote for someone else
    real = only(voter.receive(3, vote(3, 2, 1, 1), 0), VoteResponse)
    assert isinstance(real, VoteResponse) and real.vote_granted


def test_a_follower_that_hears_from_its_leader_refuses_pre_votes() -> None:
    follower = node(2, stored=QuorumState(3, 4, -1))
    fetch = only(follower.tick(0), FetchRequest)
    assert isinstance(fetch, FetchRequest)
    follower.receive(3, FetchResponse(correlation_id=fetch.correlation_id, error_code=ErrorCode.NONE, leader_id=3,
                                      leader_epoch=4, high_watermark=0), 1)
    response = only(follower.receive(1, vote(1, 5, 9, 9, pre_vote=True), 2), VoteResponse)
    assert isinstance(response, VoteResponse) and not response.vote_granted
    assert follower.epoch == 4


def test_a_pre_vote_round_does_not_bump_the_epoch_until_a_majority_grants() -> None:
    prospective = node(1, log_of(1), stored=QuorumState(-1, 1, -1))
    out = prospective.tick(2 * CONFIG.election_timeout_ms)
    requests = [m for _, m in sent(out, VoteRequest)]
    assert prospective.role == "Prospective" and prospective.epoch == 1 and out.quorum_state is None
    assert {(m.candidate_epoch, m.pre_vote) for m in requests if isinstance(m, VoteRequest)} == {(2, True)}
    out = answer_votes(prospective, out, True, 0)
    assert (prospective.role, prospective.epoch) == ("Candidate", 2)
    assert out.quorum_state == QuorumState(-1, 2, 1)
    assert all(isinstance(m, VoteRequest) and not m.pre_vote and m.candidate_epoch == 2 for _, m in out.messages)


def test_a_lost_pre_vote_returns_to_the_leader_it_followed() -> None:
    follower = node(1, stored=QuorumState(3, 4, -1))
    out = follower.tick(CONFIG.fetch_timeout_ms)  # the leader went quiet
    assert (follower.role, follower.epoch) == ("Prospective", 4)
    answer_votes(follower, out, False, CONFIG.fetch_timeout_ms)
    assert (follower.role, follower.epoch, follower.leader_id) == ("Follower", 4, 3)


# --- elections and timers -----------------------------------------------------------------------------

def test_the_election_timeout_is_randomized_between_once_and_twice_the_setting() -> None:
    timeouts = []
    for seed in range(20):
        voter = RaftNode(1, VOTERS, InMemoryRaftLog(), QuorumState(), 0, random.Random(seed), CONFIG)
        now = 0
        while voter.role == "Unattached":
            now += 10
            voter.tick(now)
        timeouts.append(now)
    assert min(timeouts) >= CONFIG.election_timeout_ms
    assert max(timeouts) <= 2 * CONFIG.election_timeout_ms
    assert len(set(timeouts)) > 5


def test_the_new_leader_writes_a_leader_change_and_announces_its_epoch() -> None:
    leader = node(1, log_of(1, 1), stored=QuorumState(-1, 1, -1))
    out = elect(leader)
    assert out.quorum_state == QuorumState(1, 2, 1)
    [change] = out.log_changes
    assert isinstance(change, LogAppended)
    assert (change.batch.base_offset, change.batch.epoch, change.batch.control) == (2, 2, True)
    message = decode_control_value(ControlType.LEADER_CHANGE, change.batch.records[0])
    assert isinstance(message, LeaderChangeMessage) and message.leader_id == 1
    assert sorted(v.voter_id for v in message.voters) == [1, 2, 3]
    announced = sorted(to for to, m in sent(out, BeginQuorumEpochRequest))
    assert announced == [2, 3]


def test_a_lost_election_backs_off_then_starts_a_pre_vote_round() -> None:
    candidate = node(1)
    out = candidate.tick(2 * CONFIG.election_timeout_ms)
    out = answer_votes(candidate, out, True, 0)
    assert candidate.role == "Candidate"
    answer_votes(candidate, out, False, 0)
    assert candidate.role == "Candidate" and candidate.epoch == 1
    candidate.tick(CONFIG.election_backoff_max_ms)  # the backoff is at most the maximum
    assert (candidate.role, candidate.epoch) == ("Prospective", 1)


def test_a_single_voter_elects_itself_and_commits_alone() -> None:
    alone = node(1, voters=(1,))
    out = alone.tick(2 * CONFIG.election_timeout_ms)
    assert alone.role == "Leader" and out.high_watermark == 1
    out = alone.append([b"a", b"b"], 5)
    assert out.high_watermark == 3


def test_a_follower_whose_leader_goes_quiet_stands_without_bumping_its_epoch() -> None:
    follower = node(2, stored=QuorumState(3, 4, 3))
    out = follower.tick(CONFIG.fetch_timeout_ms - 1)
    assert follower.role == "Follower" and sent(out, FetchRequest)
    out = follower.tick(CONFIG.fetch_timeout_ms)
    assert (follower.role, follower.epoch) == ("Prospective", 4) and out.quorum_state is None


def test_a_follower_whose_leader_is_gone_stands_at_once() -> None:
    """The leader's process is gone (the driver saw its connection reset and its port refuse): no
    waiting out the fetch timeout. The first of the other voters stands at once; the next waits its
    turn (no split vote when both see it at the same moment) and grants the first its pre-vote, since
    it no longer follows a leader it hears from."""
    follower = node(1, log_of(4), stored=QuorumState(3, 4, -1))
    only(follower.tick(0), FetchRequest)
    out = follower.leader_gone(3, 10)
    assert (follower.role, follower.epoch) == ("Prospective", 4)
    request = dict(sent(out, VoteRequest))[2]
    assert isinstance(request, VoteRequest) and request.pre_vote and request.candidate_epoch == 5
    other = node(2, log_of(4), stored=QuorumState(3, 4, -1))
    only(other.tick(0), FetchRequest)
    assert not sent(other.leader_gone(3, 10), VoteRequest) and other.role == "Follower"
    answer = only(other.receive(1, request, 11), VoteResponse)
    assert isinstance(answer, VoteResponse) and answer.vote_granted
    assert sent(other.tick(10 + CONFIG.election_backoff_max_ms // 2), VoteRequest)  # its own turn, if needed


def test_an_observer_whose_leader_is_gone_asks_the_voters_at_once() -> None:
    """A broker (an observer) that saw the leader's process gone forgets it at once and fetches from
    a voter, whose answer names the next leader; it does not wait out the fetch timeout."""
    observer = node(9, stored=QuorumState(3, 4, -1))
    assert [d for d, _ in sent(observer.tick(0), FetchRequest)] == [3]
    out = observer.leader_gone(3, 10)
    assert observer.role == "Unattached" and observer.leader_id is None and observer.epoch == 4
    assert [d for d, _ in sent(out, FetchRequest)] in ([1], [2])


def test_an_observer_asks_another_voter_when_one_cannot_be_reached() -> None:
    """An observer looking for the leader whose request cannot even be sent (the voter it picked is
    down) asks again after the retry backoff, not after the request timeout; a voter does not."""
    observer = node(9)
    (first, _), = sent(observer.tick(0), FetchRequest)
    assert not sent(observer.tick(CONFIG.retry_backoff_ms), FetchRequest)  # still in flight
    observer.connection_failed(first, 5)
    assert sent(observer.tick(5 + CONFIG.retry_backoff_ms), FetchRequest)
    voter = node(2, stored=QuorumState(3, 4, -1))
    only(voter.tick(0), FetchRequest)
    assert not voter.connection_failed(3, 5).messages and not sent(voter.tick(30), FetchRequest)


def test_news_of_another_voter_or_of_a_leader_not_followed_changes_nothing() -> None:
    follower = node(2, stored=QuorumState(3, 4, -1))
    follower.tick(0)
    assert not follower.leader_gone(1, 10).messages and follower.role == "Follower"
    leader = node(1)
    elect(leader)
    leader.leader_gone(2, 10)
    assert leader.role == "Leader"


def test_a_new_leader_reports_no_high_watermark_until_its_epoch_commits() -> None:
    """What a new leader learned as a follower may be below what another replica was told by the
    old leader; Kafka's replicas refuse a high watermark that goes back (and stop), so a leader
    reports -1 until a record of its own epoch is committed, as Kafka's LeaderState does."""
    leader = node(1, log_of(1, 1, 1))
    leader.high_watermark = 2  # learned as a follower; another replica may have seen 3
    elect(leader, now=0)
    assert leader.role == "Leader"
    fetch = FetchRequest(correlation_id=5, replica_id=9, current_leader_epoch=leader.epoch, fetch_offset=0,
                         last_fetched_epoch=0)
    answer = only(leader.receive(9, fetch, 1), FetchResponse)
    assert isinstance(answer, FetchResponse) and answer.high_watermark == -1
    end = leader.log.end_offset
    leader.receive(2, FetchRequest(correlation_id=6, replica_id=2, current_leader_epoch=leader.epoch,
                                   fetch_offset=end, last_fetched_epoch=leader.epoch), 2)
    answer = only(leader.receive(9, FetchRequest(correlation_id=7, replica_id=9, current_leader_epoch=leader.epoch,
                                                 fetch_offset=0, last_fetched_epoch=0), 3), FetchResponse)
    assert isinstance(answer, FetchResponse) and answer.high_watermark == end


def test_appending_on_a_replica_that_does_not_lead_is_refused() -> None:
    with pytest.raises(KafkaError) as error:
        node(2).append([b"x"], 0)
    assert error.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER


# --- replication ----------------------------------------------------------------------------------------

def fetch(replica: int, offset: int, last_epoch: int, epoch: int, cid: int = 1) -> FetchRequest:
    return FetchRequest(correlation_id=cid, replica_id=replica, current_leader_epoch=epoch, fetch_offset=offset,
                        last_fetched_epoch=last_epoch)


def leader_at_epoch_3() -> RaftNode:
    """Voter 1 leading epoch 3 over a log of epochs 1, 1, 2 (offsets 0-2), its LeaderChangeMessage at 3."""
    leader = node(1, log_of(1, 1, 2), stored=QuorumState(-1, 2, -1))
    elect(leader)
    assert leader.epoch == 3 and leader.log.end_offset == 4
    return leader


def test_the_leader_answers_a_diverged_fetch_with_the_end_of_the_common_epoch() -> None:
    leader = leader_at_epoch_3()
    out = leader.receive(2, fetch(2, 5, last_epoch=2, epoch=3), 0)  # the follower has more of epoch 2
    response = only(out, FetchResponse)
    assert isinstance(response, FetchResponse)
    assert response.diverging_epoch == OffsetAndEpoch(2, 3) and response.batches == ()


def test_a_diverged_follower_truncates_to_the_leader_s_end_of_its_last_common_epoch() -> None:
    follower = node(2, log_of(1, 1, 1, 2, 2), stored=QuorumState(1, 3, -1))
    request = only(follower.tick(0), FetchRequest)
    assert isinstance(request, FetchRequest) and (request.fetch_offset, request.last_fetched_epoch) == (5, 2)
    out = follower.receive(1, FetchResponse(correlation_id=request.correlation_id, error_code=ErrorCode.NONE,
                                            leader_id=1, leader_epoch=3, high_watermark=0,
                                            diverging_epoch=OffsetAndEpoch(1, 2)), 1)
    assert out.log_changes == [LogTruncated(2)]
    assert follower.log.end_offset == 2
    again = only(out, FetchRequest)
    assert isinstance(again, FetchRequest) and (again.fetch_offset, again.last_fetched_epoch) == (2, 1)


@pytest.mark.parametrize(("epochs", "diverging", "expected"), [
    ((1, 1, 1, 2, 2), OffsetAndEpoch(2, 4), 4),  # the leader's epoch 2 ends earlier
    ((1, 1, 3, 3), OffsetAndEpoch(2, 6), 2),  # no epoch 2 here: the end of epoch 1
    ((2, 2), OffsetAndEpoch(0, 0), 0),  # nothing in common
])
def test_truncation_follows_offset_for_leader_epoch(epochs: tuple[int, ...], diverging: OffsetAndEpoch,
                                                    expected: int) -> None:
    assert truncation_offset(log_of(*epochs), diverging) == expected


def test_the_high_watermark_waits_for_a_record_of_the_leader_s_own_epoch() -> None:
    leader = leader_at_epoch_3()
    # Voter 2 has everything of the earlier epochs, not yet the LeaderChangeMessage: offsets 0-2
    # are on a majority, but exposing them now could expose what a later leader overwrites.
    out = leader.receive(2, fetch(2, 3, last_epoch=2, epoch=3), 0)
    assert out.high_watermark is None and leader.high_watermark == 0
    out = leader.receive(2, fetch(2, 4, last_epoch=3, epoch=3, cid=2), 0)
    assert out.high_watermark == 4


def test_observers_fetch_but_never_count_toward_the_high_watermark() -> None:
    leader = leader_at_epoch_3()
    out = leader.receive(9, fetch(9, 4, last_epoch=3, epoch=3), 0)
    assert leader.high_watermark == 0 and out.high_watermark is None
    out = leader.receive(9, fetch(9, 0, last_epoch=0, epoch=3, cid=2), 0)
    response = only(out, FetchResponse)
    assert isinstance(response, FetchResponse) and response.batches[0].base_offset == 0
    out = leader.receive(3, fetch(3, 4, last_epoch=3, epoch=3), 0)
    assert out.high_watermark == 4


def test_an_empty_fetch_is_parked_until_there_is_something_to_say() -> None:
    leader = leader_at_epoch_3()
    leader.receive(2, fetch(2, 4, last_epoch=3, epoch=3), 0)  # commits 4, answered at once
    assert not sent(leader.receive(3, fetch(3, 4, last_epoch=3, epoch=3), 1), FetchResponse)
    out = leader.append([b"new"], 2)
    response = only(out, FetchResponse)
    assert isinstance(response, FetchResponse) and [b.records for b in response.batches] == [(b"new",)]
    leader.receive(2, fetch(2, 5, last_epoch=3, epoch=3, cid=2), 3)  # commits 5, answered at once
    assert not sent(leader.receive(3, fetch(3, 5, last_epoch=3, epoch=3, cid=2), 3), FetchResponse)
    assert not sent(leader.tick(3 + CONFIG.fetch_max_wait_ms - 1), FetchResponse)
    assert sent(leader.tick(3 + CONFIG.fetch_max_wait_ms), FetchResponse)


def test_two_observers_with_one_node_id_keep_their_own_parked_fetches() -> None:
    """Two processes started with one node.id (an operator's mistake), told apart by their directory
    ids: the second one's parked fetch does not replace the first one's, so an append answers both
    (it left the live broker unanswered until its request timed out, again and again)."""
    leader = leader_at_epoch_3()
    leader.receive(2, fetch(2, 4, last_epoch=3, epoch=3), 0)  # commits 4
    for cid, directory in ((7, uuid.UUID(int=1)), (8, uuid.UUID(int=2))):
        request = FetchRequest(correlation_id=cid, replica_id=9, current_leader_epoch=3, fetch_offset=4,
                               last_fetched_epoch=3, high_watermark=4, replica_directory_id=directory)
        assert not sent(leader.receive(9, request, 1), FetchResponse)
    answers = sent(leader.append([b"new"], 2), FetchResponse)
    assert sorted(m.correlation_id for to, m in answers if to == 9) == [7, 8]


def test_a_fetcher_behind_the_high_watermark_is_answered_at_once() -> None:
    """KIP-1166: voter 3 fetched offset 4 before voter 2's fetch moved the high watermark to 4; its
    next fetch says it knows 0, so it is answered at once with 4 instead of parked until the wait ends.
    One that knows the high watermark already is parked as before."""
    leader = leader_at_epoch_3()
    leader.receive(2, fetch(2, 4, last_epoch=3, epoch=3), 0)  # commits 4
    request = FetchRequest(correlation_id=2, replica_id=3, current_leader_epoch=3, fetch_offset=4,
                           last_fetched_epoch=3, high_watermark=0)
    response = only(leader.receive(3, request, 1), FetchResponse)
    assert isinstance(response, FetchResponse) and response.high_watermark == 4 and response.batches == ()
    caught_up = FetchRequest(correlation_id=3, replica_id=3, current_leader_epoch=3, fetch_offset=4,
                             last_fetched_epoch=3, high_watermark=4)
    assert not sent(leader.receive(3, caught_up, 2), FetchResponse)


def test_a_follower_sends_the_high_watermark_it_knows() -> None:
    follower = node(2, stored=QuorumState(1, 3, -1))
    request = only(follower.tick(0), FetchRequest)
    assert isinstance(request, FetchRequest)
    batches = (RaftBatch(0, 3, (b"a", b"b")),)
    out = follower.receive(1, FetchResponse(correlation_id=request.correlation_id, error_code=ErrorCode.NONE,
                                            leader_id=1, leader_epoch=3, high_watermark=1, batches=batches), 1)
    following = only(out, FetchRequest)  # the next fetch goes at once
    assert isinstance(following, FetchRequest) and (following.fetch_offset, following.high_watermark) == (2, 1)


def test_a_follower_appends_what_it_fetches_and_learns_the_high_watermark() -> None:
    follower = node(2, stored=QuorumState(1, 3, -1))
    request = only(follower.tick(0), FetchRequest)
    assert isinstance(request, FetchRequest)
    batches = (RaftBatch(0, 3, (b"a", b"b")),)
    out = follower.receive(1, FetchResponse(correlation_id=request.correlation_id, error_code=ErrorCode.NONE,
                                            leader_id=1, leader_epoch=3, high_watermark=5, batches=batches), 1)
    assert out.log_changes == [LogAppended(batches[0])]
    assert out.high_watermark == 2  # no further than its own log
    stale = follower.receive(1, FetchResponse(correlation_id=request.correlation_id, error_code=ErrorCode.NONE,
                                              leader_id=1, leader_epoch=3, high_watermark=5, batches=batches), 2)
    assert stale.log_changes == []  # an answer already taken is not taken twice


@pytest.mark.parametrize(("epoch", "error"), [(2, ErrorCode.FENCED_LEADER_EPOCH), (4, ErrorCode.UNKNOWN_LEADER_EPOCH)])
def test_a_fetch_of_another_epoch_is_refused(epoch: int, error: ErrorCode) -> None:
    leader = leader_at_epoch_3()
    response = only(leader.receive(2, fetch(2, 0, 0, epoch), 0), FetchResponse)
    assert isinstance(response, FetchResponse) and response.error_code is error and response.leader_epoch == 3


# --- leaving the leadership ---------------------------------------------------------------------------------

def test_a_resigning_leader_names_its_most_caught_up_successor_first() -> None:
    leader = leader_at_epoch_3()
    leader.receive(3, fetch(3, 4, last_epoch=3, epoch=3), 0)
    leader.receive(2, fetch(2, 3, last_epoch=2, epoch=3), 0)
    out = leader.resign(1)
    assert leader.role == "Resigned"
    requests = [m for _, m in sent(out, EndQuorumEpochRequest)]
    assert [m.preferred_successors for m in requests if isinstance(m, EndQuorumEpochRequest)] == [(3, 2), (3, 2)]
    # the first successor stands at once, without waiting for its fetch timeout
    follower = node(3, stored=QuorumState(1, 3, -1))
    follower.receive(1, requests[0], 2)
    follower.tick(2)
    assert (follower.role, follower.epoch) == ("Prospective", 3)


def test_a_leader_that_no_majority_fetches_from_resigns() -> None:
    leader = leader_at_epoch_3()
    check_quorum_ms = int(CONFIG.fetch_timeout_ms * 1.5)
    leader.receive(2, fetch(2, 4, last_epoch=3, epoch=3), check_quorum_ms - 10)  # a majority, with itself
    leader.tick(check_quorum_ms)
    assert leader.role == "Leader"
    out = leader.tick(2 * check_quorum_ms)
    assert leader.role == "Resigned" and sent(out, EndQuorumEpochRequest)


def test_begin_quorum_epoch_makes_a_follower_of_the_new_epoch() -> None:
    voter = node(2, stored=QuorumState(-1, 2, 1))
    out = voter.receive(1, BeginQuorumEpochRequest(correlation_id=1, leader_id=1, leader_epoch=3), 0)
    assert (voter.role, voter.leader_id, voter.epoch) == ("Follower", 1, 3)
    assert out.quorum_state == QuorumState(1, 3, -1) and out.leader_changed


def test_describe_quorum_shows_the_leader_s_view_of_voters_and_observers() -> None:
    leader = leader_at_epoch_3()
    leader.receive(2, fetch(2, 4, last_epoch=3, epoch=3), 10)  # at the leader's end: caught up
    leader.receive(9, fetch(9, 0, last_epoch=0, epoch=3), 20)  # an observer far behind
    answer = leader.describe_quorum(30)
    assert (answer.error_code, answer.leader_id, answer.leader_epoch, answer.high_watermark) == (0, 1, 3, 4)
    assert [(r.replica_id, r.log_end_offset, r.last_fetch_timestamp, r.last_caught_up_timestamp)
            for r in answer.current_voters] == [(1, 4, 30, 30), (2, 4, 10, 10), (3, -1, -1, -1)]
    assert [(r.replica_id, r.log_end_offset, r.last_fetch_timestamp, r.last_caught_up_timestamp)
            for r in answer.observers] == [(9, 0, 20, -1)]
    assert node(2, stored=QuorumState(1, 3, -1)).describe_quorum(0).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
