"""The Raft core with snapshots: which fetches a leader answers with a snapshot id (Kafka's
tryCompleteFetchRequest and validateOffsetAndEpoch), FetchSnapshot's answers (Kafka's
handleFetchSnapshotRequest), and a follower that loads a snapshot chunk by chunk and then fetches the
log after it, on the in-memory log; and the snapshot files and cleaning of the log on disk."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from grete.coordinator.kraft.quorum import QuorumState
from grete.coordinator.kraft.raft import RaftConfig, RaftNode
from grete.coordinator.kraft.raft_log import BOOTSTRAP_SNAPSHOT, InMemoryRaftLog, OffsetAndEpoch, RaftBatch
from grete.coordinator.kraft.raft_messages import (
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RaftMessage,
    RaftOutput,
    VoteRequest,
    VoteResponse,
)
from grete.coordinator.kraft.raft_segment_log import SegmentRaftLog
from grete.coordinator.kraft.raft_snapshots import Snapshots
from grete.protocol.errors import ErrorCode

VOTERS = (1, 2, 3)
SNAPSHOT = OffsetAndEpoch(2, 6)  # the state at offset 6, whose last record is of epoch 2
SNAPSHOT_BYTES = bytes(range(256)) * 40  # 10,240 bytes: fetched in several chunks below


def node(node_id: int, log: InMemoryRaftLog, stored: QuorumState) -> RaftNode:
    return RaftNode(node_id, VOTERS, log, stored, 0, random.Random(0), RaftConfig())


def only(out: RaftOutput, kind: type[RaftMessage]) -> RaftMessage:
    found = [m for _to, m in out.messages if isinstance(m, kind)]
    assert len(found) == 1, out.messages
    return found[0]


def snapshotted_log() -> InMemoryRaftLog:
    """A leader's log whose records before offset 6 are gone, replaced by SNAPSHOT; epochs 2, 2 after it."""
    log = InMemoryRaftLog(start_offset=6)
    log.snapshots[SNAPSHOT] = SNAPSHOT_BYTES
    for _ in range(2):
        log.append(RaftBatch(log.end_offset, 2, (b"r%d" % log.end_offset,)))
    return log


def leader_of(log: InMemoryRaftLog) -> RaftNode:
    """Voter 1 leading epoch 3 over ``log`` (every vote granted)."""
    leader = node(1, log, QuorumState(-1, 2, -1))
    messages = leader.tick(2 * RaftConfig().election_timeout_ms).messages
    for _ in range(2):  # the pre-vote round, then the vote
        asked, messages = [(t, m) for t, m in messages if isinstance(m, VoteRequest)], []
        for voter, request in asked:
            messages += leader.receive(voter, VoteResponse(correlation_id=request.correlation_id, error_code=ErrorCode.NONE,
                                                           leader_id=-1, leader_epoch=leader.epoch, vote_granted=True), 0).messages
    assert leader.role == "Leader" and leader.epoch == 3
    return leader


def fetch(offset: int, last_epoch: int, epoch: int = 3) -> FetchRequest:
    return FetchRequest(correlation_id=1, replica_id=2, current_leader_epoch=epoch, fetch_offset=offset,
                        last_fetched_epoch=last_epoch)


# --- the leader: which fetch gets a snapshot --------------------------------------------------------

@pytest.mark.parametrize(("offset", "last_epoch"), [(0, 0), (3, 1), (6, 1)])
def test_a_fetch_the_log_cannot_continue_is_sent_to_the_latest_snapshot(offset: int, last_epoch: int) -> None:
    """An empty replica, a fetch before the log start, one at the start with another epoch than the
    snapshot's: the answer names the snapshot, with no records."""
    leader = leader_of(snapshotted_log())
    answer = only(leader.receive(2, fetch(offset, last_epoch), 0), FetchResponse)
    assert isinstance(answer, FetchResponse) and answer.error_code is ErrorCode.NONE
    assert answer.snapshot_id == SNAPSHOT and answer.batches == () and answer.diverging_epoch is None


def test_a_fetch_from_the_snapshot_s_end_continues_in_the_log() -> None:
    leader = leader_of(snapshotted_log())
    answer = only(leader.receive(2, fetch(6, 2), 0), FetchResponse)
    assert isinstance(answer, FetchResponse) and answer.snapshot_id is None
    assert [(b.base_offset, b.epoch) for b in answer.batches] == [(6, 2), (8, 3)]  # then the LeaderChange of epoch 3


def test_an_empty_replica_gets_a_snapshot_even_when_the_log_still_starts_at_zero() -> None:
    """Kafka's leader sends a replica fetching from 0 to any snapshot but the bootstrap one."""
    log = InMemoryRaftLog()
    for epoch in (1, 1, 2):
        log.append(RaftBatch(log.end_offset, epoch, (b"x",)))
    log.snapshots[BOOTSTRAP_SNAPSHOT] = b"voters"
    leader = leader_of(log)
    first = only(leader.receive(2, fetch(0, 0), 0), FetchResponse)
    assert isinstance(first, FetchResponse) and first.snapshot_id is None and first.batches  # the bootstrap one is not sent
    log.snapshots[OffsetAndEpoch(1, 2)] = b"state"
    second = only(leader.receive(2, fetch(0, 0), 0), FetchResponse)
    assert isinstance(second, FetchResponse) and second.snapshot_id == OffsetAndEpoch(1, 2)


# --- the leader: FetchSnapshot ----------------------------------------------------------------------

def snapshot_request(snapshot: OffsetAndEpoch = SNAPSHOT, position: int = 0, epoch: int = 3,
                     max_bytes: int = 4096) -> FetchSnapshotRequest:
    return FetchSnapshotRequest(correlation_id=5, replica_id=2, current_leader_epoch=epoch, snapshot_id=snapshot,
                                position=position, max_bytes=max_bytes)


def test_fetch_snapshot_answers_a_slice_from_the_position() -> None:
    leader = leader_of(snapshotted_log())
    answer = only(leader.receive(2, snapshot_request(position=4096), 0), FetchSnapshotResponse)
    assert isinstance(answer, FetchSnapshotResponse) and answer.error_code is ErrorCode.NONE
    assert (answer.snapshot_id, answer.size, answer.position) == (SNAPSHOT, len(SNAPSHOT_BYTES), 4096)
    assert answer.data == SNAPSHOT_BYTES[4096:8192] and (answer.leader_id, answer.leader_epoch) == (1, 3)


@pytest.mark.parametrize(("request_", "error"), [
    (snapshot_request(OffsetAndEpoch(2, 5)), ErrorCode.SNAPSHOT_NOT_FOUND),
    (snapshot_request(BOOTSTRAP_SNAPSHOT), ErrorCode.SNAPSHOT_NOT_FOUND),  # never replicated
    (snapshot_request(position=len(SNAPSHOT_BYTES)), ErrorCode.POSITION_OUT_OF_RANGE),
    (snapshot_request(position=-1), ErrorCode.POSITION_OUT_OF_RANGE),
    (snapshot_request(epoch=2), ErrorCode.FENCED_LEADER_EPOCH),
    (snapshot_request(epoch=4), ErrorCode.UNKNOWN_LEADER_EPOCH),
])
def test_fetch_snapshot_refusals(request_: FetchSnapshotRequest, error: ErrorCode) -> None:
    log = snapshotted_log()
    log.snapshots[BOOTSTRAP_SNAPSHOT] = b"voters"
    leader = leader_of(log)
    answer = only(leader.receive(2, request_, 0), FetchSnapshotResponse)
    assert isinstance(answer, FetchSnapshotResponse) and answer.error_code is error and answer.data == b""


def test_fetch_snapshot_on_a_follower_names_the_leader() -> None:
    follower = node(2, InMemoryRaftLog(), QuorumState(1, 3, -1))
    answer = only(follower.receive(3, snapshot_request(), 0), FetchSnapshotResponse)
    assert isinstance(answer, FetchSnapshotResponse) and answer.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (answer.leader_id, answer.leader_epoch) == (1, 3)


# --- the follower ------------------------------------------------------------------------------------

def route(leader: RaftNode, follower: RaftNode, out: RaftOutput, now: int, rounds: int = 20) -> list[RaftOutput]:
    """Carry the follower's requests to the leader and the answers back until nothing is sent; what
    the follower's inputs made it do, in order."""
    seen = []
    for _ in range(rounds):
        requests = [m for to, m in out.messages if to == 1 and isinstance(m, FetchRequest | FetchSnapshotRequest)]
        if not requests:
            break
        answers = [m for to, m in leader.receive(2, requests[0], now).messages if to == 2]
        if not answers:  # a parked fetch: nothing new for the follower
            break
        out = follower.receive(1, answers[0], now)
        seen.append(out)
    return seen


def test_an_empty_follower_loads_the_leader_s_snapshot_in_chunks_then_fetches_the_log_after_it() -> None:
    leader = leader_of(snapshotted_log())
    follower_log = InMemoryRaftLog()
    follower = node(2, follower_log, QuorumState(1, 3, -1))
    seen = route(leader, follower, follower.tick(0), 0)
    chunks = [out for out in seen if any(isinstance(m, FetchSnapshotRequest) for _to, m in out.messages)]
    assert len(chunks) == 1  # the whole snapshot in one chunk of up to 8 MiB, as Kafka asks
    loaded = [out for out in seen if out.snapshot_loaded is not None]
    assert [out.snapshot_loaded for out in loaded] == [SNAPSHOT] and loaded[0].high_watermark == 6
    assert follower_log.snapshots[SNAPSHOT] == SNAPSHOT_BYTES
    assert follower_log.start_offset == 6 and follower_log.end_offset == leader.log.end_offset
    assert [follower_log.entry(o) for o in range(6, 8)] == [leader.log.entry(o) for o in range(6, 8)]


def test_a_snapshot_the_leader_no_longer_has_is_given_up_for_a_fetch() -> None:
    follower = node(2, InMemoryRaftLog(), QuorumState(1, 3, -1))
    request = only(follower.tick(0), FetchRequest)
    out = follower.receive(1, FetchResponse(correlation_id=request.correlation_id, error_code=ErrorCode.NONE,
                                            leader_id=1, leader_epoch=3, high_watermark=8, snapshot_id=SNAPSHOT), 1)
    asked = only(out, FetchSnapshotRequest)
    assert isinstance(asked, FetchSnapshotRequest) and (asked.snapshot_id, asked.position) == (SNAPSHOT, 0)
    out = follower.receive(1, FetchSnapshotResponse(correlation_id=asked.correlation_id, error_code=ErrorCode.SNAPSHOT_NOT_FOUND,
                                                    leader_id=1, leader_epoch=3), 2)
    again = follower.tick(2 + RaftConfig().retry_backoff_ms)
    assert isinstance(only(again, FetchRequest), FetchRequest) and out.snapshot_loaded is None


# --- on disk -----------------------------------------------------------------------------------------

def disk_log(tmp_path: Path, epochs: tuple[int, ...]) -> SegmentRaftLog:
    log = SegmentRaftLog(tmp_path / "__cluster_metadata-0")
    for epoch in epochs:
        log.append(RaftBatch(log.end_offset, epoch, (b"r%d" % log.end_offset,)))
    return log


def test_a_log_starts_at_its_own_snapshot_and_answers_for_the_epochs_before_it(tmp_path: Path) -> None:
    log = disk_log(tmp_path, (1, 1, 2, 2, 3))
    snapshot = OffsetAndEpoch(2, 4)
    log.snapshots.write(snapshot, [b"state"], [], last_contained_timestamp=1)
    log.start_at_snapshot(snapshot)
    assert (log.start_offset, log.end_offset, log.last_epoch) == (4, 5, 3)
    assert log.epoch_end_offset(1) == snapshot  # older than the log: the snapshot at its start
    assert log.read(4, 10)[0].base_offset == 4


def test_a_fetched_snapshot_is_frozen_whole_and_replaces_a_log_behind_it(tmp_path: Path) -> None:
    log = disk_log(tmp_path, (1, 1))
    snapshot = OffsetAndEpoch(3, 9)
    assert log.write_snapshot_chunk(snapshot, 0, b"abc") == 3
    assert log.write_snapshot_chunk(snapshot, 3, b"defg") == 7
    assert log.snapshot_size(snapshot) is None  # not frozen yet
    log.freeze_snapshot(snapshot)
    assert log.read_snapshot(snapshot, 2, 3) == b"cde" and log.snapshot_size(snapshot) == 7
    assert not list(log.snapshots.dir.glob("*.part"))
    assert log.truncate_to_latest_snapshot()
    assert (log.start_offset, log.end_offset, log.last_epoch) == (9, 9, 3)
    assert not log.truncate_to_latest_snapshot()  # the log is at it now


def test_a_snapshot_fetch_cut_short_by_a_crash_is_forgotten_at_start(tmp_path: Path) -> None:
    log = disk_log(tmp_path, (1,))
    log.write_snapshot_chunk(OffsetAndEpoch(1, 5), 0, b"half")
    log.close()
    again = disk_log(tmp_path, ())
    assert again.latest_snapshot() is None and not list(again.snapshots.dir.glob("*.part"))


def test_cleaning_keeps_the_latest_snapshot_and_goes_by_age_then_size(tmp_path: Path) -> None:
    snapshots = Snapshots(tmp_path)
    first, second, third = OffsetAndEpoch(1, 10), OffsetAndEpoch(1, 20), OffsetAndEpoch(2, 30)
    snapshots.write(first, [b"x" * 100], [], last_contained_timestamp=1_000)
    assert snapshots.cleanable(0, retention_bytes=0, retention_ms=0, now_ms=10**9) is None  # never the only one
    snapshots.write(second, [b"x" * 100], [], last_contained_timestamp=5_000)
    snapshots.write(third, [b"x" * 100], [], last_contained_timestamp=9_000)
    assert snapshots.cleanable(0, retention_bytes=-1, retention_ms=3_000, now_ms=6_000) == second  # first is 5 s old
    assert snapshots.cleanable(0, retention_bytes=-1, retention_ms=3_000, now_ms=9_000) == third
    assert snapshots.cleanable(0, retention_bytes=-1, retention_ms=-1, now_ms=9_000) is None
    size = snapshots.size(first) or 0
    assert snapshots.cleanable(0, retention_bytes=3 * size - 1, retention_ms=-1, now_ms=0) == second
    snapshots.delete_before(second)
    assert snapshots.ids == [second, third] and not snapshots.path(first).exists()
