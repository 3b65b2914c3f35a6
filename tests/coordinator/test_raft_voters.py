"""A dynamic quorum's voter set (KIP-853) in the Raft core: it comes from the bootstrap snapshot and
then from the log's VotersRecords, goes back when the log is truncated, is copied into the log by the
first leader, and changes through AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter with Kafka's
refusals; voters are keyed by id and directory id."""

from __future__ import annotations

import random
import uuid

import pytest

from grete.coordinator.kraft.quorum import QuorumState
from grete.coordinator.kraft.raft import RaftConfig, RaftNode
from grete.coordinator.kraft.raft_log import InMemoryRaftLog, RaftBatch, RaftLog
from grete.coordinator.kraft.raft_messages import FetchRequest
from grete.coordinator.kraft.voters import BEFORE_LOG, Endpoint, VoterHistory, VoterNode, VoterSet, local_node
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import KRaftVersionRecord, VotersRecord
from grete.protocol.metadata_frame import decode_control_value, encode_control_value
from grete.protocol.records.control import ControlType

CONFIG = RaftConfig()
DIRS = {i: uuid.UUID(int=100 + i) for i in range(1, 6)}


def voter(node_id: int, port: int | None = None) -> VoterNode:
    return local_node(node_id, DIRS[node_id], (Endpoint("CONTROLLER", "127.0.0.1", port or 9000 + node_id),))


def dynamic(*ids: int) -> VoterHistory:
    """The bootstrap snapshot of ``--initial-controllers`` for ``ids``: kraft.version 1."""
    return VoterHistory(VoterSet({i: voter(i) for i in ids}), kraft_version=1)


def replica(node_id: int, history: VoterHistory, log: RaftLog | None = None) -> RaftNode:
    return RaftNode(node_id, history, log if log is not None else InMemoryRaftLog(), QuorumState(), 0,
                    random.Random(0), CONFIG, local=voter(node_id))


def lone_leader() -> RaftNode:
    """A dynamic quorum of voter 1 alone, leading with its epoch committed."""
    leader = replica(1, dynamic(1))
    leader.tick(2 * CONFIG.election_timeout_ms)
    assert leader.role == "Leader" and leader.high_watermark > 0
    return leader


def fetch(replica_id: int, offset: int, last_epoch: int, epoch: int, directory: uuid.UUID | None = None,
          cid: int = 1) -> FetchRequest:
    return FetchRequest(correlation_id=cid, replica_id=replica_id, current_leader_epoch=epoch, fetch_offset=offset,
                        last_fetched_epoch=last_epoch,
                        replica_directory_id=DIRS[replica_id] if directory is None else directory)


def voters_record(batch: RaftBatch) -> VotersRecord | None:
    found = [decode_control_value(t, v) for _o, t, v in batch.typed_controls() if t == ControlType.KRAFT_VOTERS]
    return found[-1] if found and isinstance(found[-1], VotersRecord) else None


# --- the history -----------------------------------------------------------------------------------

def test_the_latest_voter_set_applies_and_a_truncation_goes_back_to_the_one_before() -> None:
    history = dynamic(1, 2, 3)
    history.control_record(5, ControlType.KRAFT_VOTERS, VoterSet({i: voter(i) for i in (1, 2, 3, 4)}).to_record())
    history.control_record(9, ControlType.KRAFT_VOTERS, VoterSet({i: voter(i) for i in (2, 3, 4)}).to_record())
    assert (history.latest.ids, history.latest_offset) == (frozenset({2, 3, 4}), 9)
    history.truncate(9)
    assert (history.latest.ids, history.latest_offset) == (frozenset({1, 2, 3, 4}), 5)
    history.truncate(0)
    assert (history.latest.ids, history.latest_offset, history.kraft_version) == (frozenset({1, 2, 3}), BEFORE_LOG, 1)


def test_a_voter_is_its_id_and_directory_when_the_set_knows_the_directory() -> None:
    voters = VoterSet({1: voter(1)})
    assert voters.is_voter(1, DIRS[1]) and not voters.is_voter(1, DIRS[2]) and not voters.is_voter(2, DIRS[2])
    assert VoterSet.of_ids([1]).is_voter(1, DIRS[3])  # a static set knows no directories
    assert VoterSet.from_record(voters.to_record()) == voters


# --- the first leader ------------------------------------------------------------------------------

def test_the_first_leader_copies_the_bootstrap_voter_set_into_the_log_and_a_follower_takes_it() -> None:
    leader = lone_leader()
    (first,) = leader.log.read(0, 10)
    assert first.control_types == (ControlType.LEADER_CHANGE, ControlType.KRAFT_VERSION, ControlType.KRAFT_VOTERS)
    version = decode_control_value(ControlType.KRAFT_VERSION, first.records[1])
    assert isinstance(version, KRaftVersionRecord) and version.k_raft_version == 1
    record = voters_record(first)
    assert record is not None and VoterSet.from_record(record) == dynamic(1).latest
    assert leader.history.latest_offset == 2  # the VotersRecord's own offset, after the other two
    # A replica formatted without the snapshot (an observer) learns the voters from the log.
    observer = replica(2, VoterHistory(VoterSet({})))
    observer.log.append(first)
    assert replica(2, VoterHistory(VoterSet({})), observer.log).voters == {1}


def test_a_later_leader_with_the_same_endpoints_writes_no_voter_set() -> None:
    leader = lone_leader()
    restarted = replica(1, dynamic(1), leader.log)
    restarted.tick(10 * CONFIG.election_timeout_ms)
    restarted.tick(20 * CONFIG.election_timeout_ms)
    assert restarted.role == "Leader" and restarted.epoch > leader.epoch
    last = restarted.log.read(restarted.log.end_offset - 1, 1)[0]
    assert last.control and last.control_types == ()  # the LeaderChangeMessage alone


# --- adding and removing ---------------------------------------------------------------------------

def caught_up_observer(leader: RaftNode, node_id: int) -> None:
    end, epoch = leader.log.end_offset, leader.log.last_epoch
    leader.receive(node_id, fetch(node_id, end, epoch, leader.epoch), 10)


def test_a_caught_up_observer_is_added_and_counts_from_the_append() -> None:
    leader = lone_leader()
    caught_up_observer(leader, 2)
    out = leader.add_voter(VoterNode(2, DIRS[2], voter(2).endpoints, (0, 1)), 20)
    assert leader.voters == {1, 2}
    appended = out.log_changes[-1].batch  # type: ignore[union-attr]
    record = voters_record(appended)
    assert record is not None and sorted(v.voter_id for v in record.voters) == [1, 2]
    # Uncommitted until voter 2 fetches past it: the high watermark needs both now.
    assert leader.high_watermark < leader.log.end_offset
    end = leader.log.end_offset
    out = leader.receive(2, fetch(2, end, leader.epoch, leader.epoch, cid=2), 30)
    assert leader.high_watermark == end


@pytest.mark.parametrize(("setup", "error"), [
    ("static", ErrorCode.UNSUPPORTED_VERSION),
    ("duplicate", ErrorCode.DUPLICATE_VOTER),
    ("never fetched", ErrorCode.REQUEST_TIMED_OUT),
    ("another directory", ErrorCode.REQUEST_TIMED_OUT),
    ("change pending", ErrorCode.REQUEST_TIMED_OUT),
    ("kraft.version 0 only", ErrorCode.INVALID_REQUEST),
])
def test_adding_a_voter_is_refused_as_kafka_refuses_it(setup: str, error: ErrorCode) -> None:
    if setup == "static":
        leader = RaftNode(1, (1,), InMemoryRaftLog(), QuorumState(), 0, random.Random(0), CONFIG, local=voter(1))
        leader.tick(2 * CONFIG.election_timeout_ms)
    else:
        leader = lone_leader()
    new = VoterNode(2, DIRS[2], voter(2).endpoints, (0, 1))
    if setup == "duplicate":
        new = VoterNode(1, DIRS[1], voter(1).endpoints, (0, 1))
    if setup not in ("never fetched",):
        caught_up_observer(leader, 2)
    if setup == "another directory":
        new = VoterNode(2, DIRS[3], voter(2).endpoints, (0, 1))
    if setup == "kraft.version 0 only":
        new = VoterNode(2, DIRS[2], voter(2).endpoints, (0, 0))
    if setup == "change pending":
        caught_up_observer(leader, 3)
        leader.add_voter(VoterNode(3, DIRS[3], voter(3).endpoints, (0, 1)), 20)
    with pytest.raises(KafkaError) as refused:
        leader.add_voter(new, 30)
    assert refused.value.code is error


def test_only_the_leader_changes_voters() -> None:
    follower = replica(2, dynamic(1, 2, 3))
    with pytest.raises(KafkaError) as refused:
        follower.remove_voter(3, DIRS[3], 0)
    assert refused.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_removing_a_voter_needs_its_directory_and_never_empties_the_set() -> None:
    leader = lone_leader()
    for node_id, directory in ((1, DIRS[2]), (1, DIRS[1]), (4, DIRS[4])):
        with pytest.raises(KafkaError) as refused:
            leader.remove_voter(node_id, directory, 10)
        assert refused.value.code is ErrorCode.VOTER_NOT_FOUND


def test_a_leader_that_removes_itself_resigns_once_the_removal_is_committed() -> None:
    leader = lone_leader()
    caught_up_observer(leader, 2)
    leader.add_voter(VoterNode(2, DIRS[2], voter(2).endpoints, (0, 1)), 20)
    leader.receive(2, fetch(2, leader.log.end_offset, leader.epoch, leader.epoch, cid=2), 30)
    leader.remove_voter(1, DIRS[1], 40)
    assert leader.voters == {2} and leader.role == "Leader"  # voter 2 has not fetched the removal yet
    end = leader.log.end_offset
    leader.receive(2, fetch(2, end, leader.epoch, leader.epoch, cid=3), 50)
    assert leader.high_watermark == end  # voter 2 alone is the majority of the new set
    leader.tick(60)
    assert leader.role == "Resigned"


def test_a_fetch_naming_another_directory_does_not_count_as_the_voter_s() -> None:
    leader = lone_leader()
    caught_up_observer(leader, 2)
    leader.add_voter(VoterNode(2, DIRS[2], voter(2).endpoints, (0, 1)), 20)
    end = leader.log.end_offset
    # A node formatted again (a new directory) with the voter's id is an observer: nothing commits.
    leader.receive(2, fetch(2, end, leader.epoch, leader.epoch, directory=DIRS[4], cid=2), 30)
    assert leader.high_watermark < end
    leader.receive(2, fetch(2, end, leader.epoch, leader.epoch, cid=3), 40)
    assert leader.high_watermark == end


def test_a_truncated_voter_set_is_forgotten_by_the_follower() -> None:
    leader = lone_leader()
    follower = replica(2, VoterHistory(VoterSet({})))
    assert follower.voters == set()
    for batch in leader.log.read(0, 10):
        follower.appended(batch)
    assert follower.voters == {1}
    uncommitted = RaftBatch(follower.log.end_offset, leader.epoch, (encode_control_value(dynamic(1, 2).latest.to_record()),),
                            True, control_types=(ControlType.KRAFT_VOTERS,))
    follower.appended(uncommitted)
    assert follower.voters == {1, 2}
    follower.truncated(uncommitted.base_offset)
    assert follower.voters == {1}


def test_an_update_with_new_endpoints_is_written_and_one_that_changes_nothing_is_not() -> None:
    leader = lone_leader()
    end = leader.log.end_offset
    leader.update_voter(voter(1), "CONTROLLER", 10)
    assert leader.log.end_offset == end
    moved = voter(1, port=9999)
    out = leader.update_voter(moved, "CONTROLLER", 20)
    record = voters_record(out.log_changes[-1].batch)  # type: ignore[union-attr]
    assert record is not None and record.voters[0].endpoints[0].port == 9999
    with pytest.raises(KafkaError) as refused:
        leader.update_voter(local_node(1, DIRS[1], (Endpoint("OTHER", "h", 1),)), "CONTROLLER", 30)
    assert refused.value.code is ErrorCode.INVALID_REQUEST
