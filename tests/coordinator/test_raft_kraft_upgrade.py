"""A static quorum (kraft.version 0) in the Raft core, as Kafka 4.3.1 runs one: each voter tells
each new leader its directory id, endpoints and kraft.version range (UpdateRaftVoter) a fetch timeout
after it starts following; the leader keeps them in memory, writes nothing, and upgrades the quorum
to kraft.version 1 (a dynamic one: KRaftVersionRecord and VotersRecord in one control batch) once
every voter has told it, with Kafka's refusals before that."""

from __future__ import annotations

import random

import pytest

from grete.coordinator.kraft.quorum import QuorumState
from grete.coordinator.kraft.raft import RaftConfig, RaftNode
from grete.coordinator.kraft.raft_log import InMemoryRaftLog
from grete.coordinator.kraft.raft_messages import (
    FetchRequest,
    FetchResponse,
    UpdateVoterRequest,
    UpdateVoterResponse,
)
from grete.coordinator.kraft.voters import VoterNode, VoterSet
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import KRaftVersionRecord, VotersRecord
from grete.protocol.metadata_frame import decode_control_value
from tests.coordinator.test_raft import elect
from tests.coordinator.test_raft_voters import DIRS, voter

CONFIG = RaftConfig()
FETCH_TIMEOUT = CONFIG.fetch_timeout_ms


def static(node_id: int, stored: QuorumState | None = None) -> RaftNode:
    return RaftNode(node_id, (1, 2, 3), InMemoryRaftLog(), stored or QuorumState(), 0, random.Random(0), CONFIG,
                    local=voter(node_id))


def leading() -> RaftNode:
    """Voter 1 of a static quorum of three, leading epoch 1 with its epoch committed."""
    leader = static(1)
    elect(leader)
    end = leader.log.end_offset
    leader.receive(2, FetchRequest(correlation_id=1, replica_id=2, replica_directory_id=DIRS[2],
                                   current_leader_epoch=leader.epoch, fetch_offset=end, last_fetched_epoch=leader.epoch), 20)
    assert leader.high_watermark == end
    return leader


def follow(follower: RaftNode, until: int, answers: list[ErrorCode]) -> list[tuple[int, UpdateVoterRequest]]:
    """Drive ``follower`` with a leader (voter 1, epoch 1) that answers each request 100 ms after
    it went out, UpdateRaftVoter with ``answers`` in turn; each UpdateRaftVoter, with when it went out."""
    told: list[tuple[int, UpdateVoterRequest]] = []
    now, out = 0, follower.tick(0)
    while now < until:
        now += 100
        requests = [m for _to, m in out.messages]
        out = follower.tick(now)
        for request in requests:
            if isinstance(request, UpdateVoterRequest):
                told.append((now - 100, request))
                out = follower.receive(1, UpdateVoterResponse(correlation_id=request.correlation_id, error_code=answers.pop(0),
                                                              leader_id=1, leader_epoch=1), now)
            elif isinstance(request, FetchRequest):
                out = follower.receive(1, FetchResponse(correlation_id=request.correlation_id, error_code=ErrorCode.NONE,
                                                        leader_id=1, leader_epoch=1, high_watermark=0), now)
    return told


def test_a_voter_tells_a_new_leader_its_endpoints_once_a_fetch_timeout_into_following_it() -> None:
    follower = static(2, QuorumState(leader_id=1, leader_epoch=1, voted_id=-1))
    # Not taken the first time (the leader has no high watermark yet): told again a period later;
    # then taken: never again to this leader.
    told = follow(follower, 6 * FETCH_TIMEOUT, [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NONE])
    assert len(told) == 2 and FETCH_TIMEOUT <= told[0][0] <= FETCH_TIMEOUT + 200
    assert 2 * FETCH_TIMEOUT <= told[1][0] <= 2 * FETCH_TIMEOUT + 300
    assert told[0][1].voter == voter(2) and told[0][1].current_leader_epoch == 1
    assert follower.role == "Follower"


def test_a_voter_without_a_directory_id_sends_nothing() -> None:
    follower = RaftNode(2, (1, 2, 3), InMemoryRaftLog(), QuorumState(leader_id=1, leader_epoch=1, voted_id=-1), 0,
                        random.Random(0), CONFIG)
    assert follow(follower, 3 * FETCH_TIMEOUT, []) == []


def test_the_upgrade_waits_for_every_voter_then_writes_the_voter_set() -> None:
    leader = leading()
    end = leader.log.end_offset
    with pytest.raises(KafkaError) as refused:
        leader.upgrade_kraft_version(1, False, 30)
    assert refused.value.code is ErrorCode.INVALID_UPDATE_VERSION
    assert refused.value.message == "Invalid upgrade of kraft.version to KRAFT_VERSION_1 because not all of the voters support it"
    leader.update_voter(voter(2), "CONTROLLER", 40)
    assert leader.log.end_offset == end  # kraft.version 0: kept in memory, nothing written
    with pytest.raises(KafkaError):
        leader.upgrade_kraft_version(1, True, 50)  # voter 3 has not told it yet
    leader.update_voter(voter(3), "CONTROLLER", 60)
    leader.upgrade_kraft_version(1, True, 70)  # validate only: every check passes, nothing written
    assert leader.log.end_offset == end and not leader.history.dynamic
    out = leader.upgrade_kraft_version(1, False, 80)
    (appended,) = out.log_changes
    batch = appended.batch  # type: ignore[union-attr]
    assert batch.control and leader.history.dynamic and leader.history.latest == VoterSet({i: voter(i) for i in (1, 2, 3)})
    version, voters = (decode_control_value(t, v) for _o, t, v in batch.typed_controls())
    assert isinstance(version, KRaftVersionRecord) and version.k_raft_version == 1
    assert isinstance(voters, VotersRecord) and [v.voter_directory_id for v in voters.voters] == [DIRS[1], DIRS[2], DIRS[3]]
    assert leader.upgrade_kraft_version(1, False, 90).log_changes == []  # the same version again: nothing to do
    with pytest.raises(KafkaError) as downgrade:
        leader.upgrade_kraft_version(0, False, 100)
    assert "because the new version is a downgrade" in (downgrade.value.message or "")


def test_a_static_leader_refuses_an_unknown_voter_and_a_range_without_version_0() -> None:
    leader = leading()
    with pytest.raises(KafkaError) as unknown:
        leader.update_voter(voter(4), "CONTROLLER", 30)
    assert unknown.value.code is ErrorCode.VOTER_NOT_FOUND
    only_dynamic = VoterNode(2, DIRS[2], voter(2).endpoints, (1, 1))
    with pytest.raises(KafkaError) as unsupported:
        leader.update_voter(only_dynamic, "CONTROLLER", 40)
    assert unsupported.value.code is ErrorCode.INVALID_REQUEST


def test_only_the_leader_upgrades() -> None:
    with pytest.raises(KafkaError) as refused:
        static(2, QuorumState(leader_id=1, leader_epoch=1, voted_id=-1)).upgrade_kraft_version(1, False, 0)
    assert refused.value.code is ErrorCode.NOT_CONTROLLER
