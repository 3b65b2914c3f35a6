"""A follower's log: replicated appends keep the leader's offsets and epochs, and truncation after a
leader change (KIP-101 / KIP-279) leaves the follower byte-identical to the leader."""

from __future__ import annotations

from pathlib import Path

import pytest

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.control import build_end_txn_marker
from grete.storage import Log, LogConfig
from grete.storage.files import (
    read_recovery_point_checkpoint,
    read_replication_offset_checkpoint,
    write_recovery_point_checkpoint,
    write_replication_offset_checkpoint,
)
from grete.storage.log import OffsetsOutOfOrderError, UnexpectedAppendOffsetError

from ._batches import fetched_batches, make_batch, records


def open_log(path: Path, **cfg: object) -> Log:
    return Log.open(path, LogConfig().replace(**cfg), clean_shutdown=True)


def leader_with(path: Path, plan: list[tuple[int, int]], **cfg: object) -> Log:
    """A log written as a leader: ``plan`` is (leader epoch, records in the batch) per batch."""
    lg = open_log(path, **cfg)
    for n, (epoch, count) in enumerate(plan):
        values = [f"{epoch}:{n}:{i}".encode() for i in range(count)]
        lg.append(make_batch(values, ts=1_000 + n), leader_epoch=epoch, now_ms=1)  # same history, same bytes
    return lg


def fetch_all(lg: Log, start: int) -> bytes:
    """Everything from ``start`` to the log end (one read stops at a segment's end)."""
    out = b""
    while start < lg.log_end_offset:
        chunk = lg.read(start, 1 << 30).read_bytes()
        out += chunk
        start = fetched_batches(chunk)[-1].last_offset + 1
    return out


def all_bytes(lg: Log) -> bytes:
    return fetch_all(lg, lg.log_start_offset)


def reconcile(follower: Log, leader: Log) -> int:
    """The follower's side of KIP-279 (one OffsetsForLeaderEpoch round): ask the leader where the
    follower's latest epoch ends, then truncate to the smaller of that and the follower's own end
    of the epoch the leader answered with. Returns the truncation offset."""
    asked = follower.epochs.latest_epoch
    epoch, leader_end = leader.end_offset_for_epoch(asked)
    assert epoch != -1, "the test logs always share epoch 0"
    if epoch == asked:
        target = min(leader_end, follower.log_end_offset)
    else:
        target = min(leader_end, follower.end_offset_for_epoch(epoch)[1])
    follower.truncate_to(target)
    return target


def test_follower_append_keeps_the_leaders_offsets_epochs_and_bytes(tmp_path: Path) -> None:
    leader = leader_with(tmp_path / "l" / "t-0", [(0, 3), (0, 1), (4, 2), (7, 5)])
    follower = open_log(tmp_path / "f" / "t-0")
    res = follower.append_as_follower(fetch_all(leader, 0), now_ms=5)
    assert (res.base_offset, res.last_offset) == (0, 10)
    assert all_bytes(follower) == all_bytes(leader)
    assert follower.epochs.entries == leader.epochs.entries == [(0, 0), (4, 4), (7, 6)]
    assert [b.partition_leader_epoch for b in fetched_batches(all_bytes(follower))] == [0, 0, 4, 7]
    assert follower.log_end_offset == 11


def test_follower_append_leaves_the_high_watermark_to_the_broker(tmp_path: Path) -> None:
    leader = leader_with(tmp_path / "l" / "t-0", [(0, 2), (0, 2)])
    follower = open_log(tmp_path / "f" / "t-0")
    follower.append_as_follower(fetch_all(leader, 0), now_ms=5)
    assert follower.high_watermark == 0 and follower.log_end_offset == 4
    follower.high_watermark = 3  # the Partition sets it from the leader's fetch response
    assert follower.high_watermark == 3 and follower.last_stable_offset == 3
    follower.high_watermark = 99
    assert follower.high_watermark == 4  # never past the log end


def test_follower_batches_one_by_one_and_gaps_are_accepted(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "t-0")
    b1 = make_batch([b"a", b"b"])
    b1.set_base_offset(10)  # a compacted leader log may start anywhere and leave holes
    b1.set_partition_leader_epoch(3)
    b2 = make_batch([b"c"])
    b2.set_base_offset(15)
    b2.set_partition_leader_epoch(3)
    follower.append_as_follower(b1, now_ms=1)
    follower.append_as_follower(b2, now_ms=1)
    assert follower.log_end_offset == 16
    assert [(o, v) for o, _, v in records(follower, 10)] == [(10, b"a"), (11, b"b"), (15, b"c")]
    assert follower.epochs.entries == [(3, 10)]


def test_follower_offsets_below_the_log_end_or_out_of_order_are_refused(tmp_path: Path) -> None:
    leader = leader_with(tmp_path / "l" / "t-0", [(0, 2), (0, 2), (1, 2)])
    follower = open_log(tmp_path / "f" / "t-0")
    follower.append_as_follower(fetch_all(leader, 0), now_ms=1)
    before = all_bytes(follower)
    with pytest.raises(UnexpectedAppendOffsetError) as err:
        follower.append_as_follower(fetch_all(leader, 2), now_ms=1)
    assert (err.value.first_offset, err.value.log_end_offset) == (2, 6) and "below the log end" in str(err.value)
    first, second = make_batch([b"x", b"y"]), make_batch([b"z"])
    first.set_base_offset(6)
    second.set_base_offset(7)  # overlaps the first batch's offset 7
    with pytest.raises(OffsetsOutOfOrderError):
        follower.append_as_follower(bytes(first.bytes_view()) + bytes(second.bytes_view()), now_ms=1)
    assert all_bytes(follower) == before and follower.log_end_offset == 6  # nothing of it written


def test_an_empty_follower_started_inside_the_leaders_first_batch_starts_at_that_batch(tmp_path: Path) -> None:
    """DeleteRecords left the leader's log start inside a batch; a follower that starts over there
    (its fetch was out of range) gets that whole batch: its log starts at the batch's base offset,
    as Kafka's follower does, instead of refusing the batch at every fetch."""
    leader = leader_with(tmp_path / "l" / "t-0", [(0, 4), (0, 4), (0, 4)])
    leader.high_watermark = leader.log_end_offset
    leader.delete_records_before(6)
    assert leader.log_start_offset == 6
    follower = open_log(tmp_path / "f" / "t-0")
    follower.truncate_fully_and_start_at(6)
    follower.append_as_follower(fetch_all(leader, 6), now_ms=1)
    assert (follower.log_start_offset, follower.log_end_offset) == (4, 12)
    assert [o for o, _, _ in records(follower, 4)] == list(range(4, 12))
    # Not when the log holds data: offsets below its end are a real conflict.
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(fetch_all(leader, 6), now_ms=1)


def test_follower_refuses_a_corrupt_batch(tmp_path: Path) -> None:
    follower = open_log(tmp_path / "t-0")
    raw = bytearray(make_batch([b"payload"]).bytes_view())
    raw[-1] ^= 0xFF
    with pytest.raises(KafkaError) as err:
        follower.append_as_follower(RecordBatch(raw), now_ms=1)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE and follower.log_end_offset == 0


def test_follower_rolls_segments_like_the_leader(tmp_path: Path) -> None:
    leader = leader_with(tmp_path / "l" / "t-0", [(0, 3)] * 12, segment_bytes=600)
    follower = open_log(tmp_path / "f" / "t-0", segment_bytes=600)
    follower.append_as_follower(fetch_all(leader, 0), now_ms=1)
    assert len(follower.segments) > 1
    assert all_bytes(follower) == all_bytes(leader)
    reopened = Log.open(follower.dir, follower.config, clean_shutdown=False)  # full recovery scan
    assert all_bytes(reopened) == all_bytes(leader) and reopened.epochs.entries == [(0, 0)]


def _txn_batch(values: list[bytes], pid: int, seq: int) -> RecordBatch:
    return make_batch(values, producer_id=pid, epoch=0, seq=seq, transactional=True)


def test_follower_tracks_producers_transactions_and_aborted_index(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "l" / "t-0")
    leader.append(_txn_batch([b"a1", b"a2"], 7, 0), leader_epoch=2, now_ms=1)      # 0-1, aborted later
    leader.append(_txn_batch([b"c1"], 8, 0), leader_epoch=2, now_ms=1)             # 2, committed later
    leader.append(make_batch([b"i"], producer_id=9, epoch=0, seq=0), leader_epoch=2, now_ms=1)  # 3
    leader.append_control(RecordBatch(build_end_txn_marker(7, 0, False, 5, 1)), leader_epoch=2, now_ms=1)
    leader.append(_txn_batch([b"c2"], 8, 1), leader_epoch=2, now_ms=1)             # 5, still open
    leader.append_control(RecordBatch(build_end_txn_marker(8, 0, True, 5, 1)), leader_epoch=2, now_ms=1)
    leader.append(_txn_batch([b"o"], 7, 2), leader_epoch=2, now_ms=1)              # 7, open at the end

    follower = open_log(tmp_path / "f" / "t-0")
    follower.append_as_follower(fetch_all(leader, 0), now_ms=1)
    follower.high_watermark = follower.log_end_offset
    leader.high_watermark = leader.log_end_offset
    assert follower.aborted_transactions(0, 100) == leader.aborted_transactions(0, 100) == [(7, 0)]
    assert follower.ongoing_transactions() == leader.ongoing_transactions() == {7: 7}
    assert follower.last_stable_offset == leader.last_stable_offset == 7
    assert {p: follower.last_sequence(p) for p in (7, 8, 9)} == {7: 2, 8: 1, 9: 0}
    marker = follower.producer(8)
    assert marker is not None and marker.coordinator_epoch == 5
    follower.close()
    reopened = Log.open(follower.dir, follower.config, clean_shutdown=False)
    assert reopened.aborted_transactions(0, 100) == [(7, 0)] and reopened.ongoing_transactions() == {7: 7}


def test_kip101_follower_truncates_its_unreplicated_epoch_and_converges(tmp_path: Path) -> None:
    # Both had epoch 0's offsets 0-2. The follower then led epoch 1 and wrote 3-4 that nobody
    # replicated; the new leader (epoch 2) wrote 3-5.
    leader = leader_with(tmp_path / "l" / "t-0", [(0, 2), (0, 1), (2, 3)])
    follower = leader_with(tmp_path / "f" / "t-0", [(0, 2), (0, 1), (1, 2)])
    assert leader.end_offset_for_epoch(1) == (0, 3)  # unknown to the leader: floor epoch 0 ends at 3
    assert reconcile(follower, leader) == 3
    assert follower.log_end_offset == 3 and follower.epochs.entries == [(0, 0)]
    follower.append_as_follower(fetch_all(leader, follower.log_end_offset), now_ms=1)
    assert all_bytes(follower) == all_bytes(leader)
    assert follower.epochs.entries == leader.epochs.entries == [(0, 0), (2, 3)]


def test_kip279_follower_truncates_to_the_leaders_shorter_end_of_a_shared_epoch(tmp_path: Path) -> None:
    # The follower has offset 2 of epoch 0 that the leader never got; then it led epoch 1 alone.
    # The leader (epoch 2) answers epoch 1 with (0, 2): the follower must cut to 2, not to its own
    # end of epoch 0 (3), or offset 2 would diverge.
    leader = leader_with(tmp_path / "l" / "t-0", [(0, 2), (2, 4)])
    follower = leader_with(tmp_path / "f" / "t-0", [(0, 2), (0, 1), (1, 2)])
    assert leader.end_offset_for_epoch(1) == (0, 2)
    assert follower.end_offset_for_epoch(0) == (0, 3)
    assert reconcile(follower, leader) == 2
    assert follower.log_end_offset == 2 and follower.epochs.entries == [(0, 0)]
    follower.append_as_follower(fetch_all(leader, 2), now_ms=1)
    assert all_bytes(follower) == all_bytes(leader)
    assert follower.end_offset_for_epoch(2) == leader.end_offset_for_epoch(2) == (2, 6)


def test_truncate_inside_a_batch_drops_the_whole_batch_and_later_epochs(tmp_path: Path) -> None:
    lg = leader_with(tmp_path / "t-0", [(0, 3), (3, 3), (5, 3)], segment_bytes=300)
    lg.high_watermark = 9
    assert lg.epochs.entries == [(0, 0), (3, 3), (5, 6)]
    lg.truncate_to(4)  # offset 4 is inside the batch [3, 5]: a batch is never split
    assert lg.log_end_offset == 3 and lg.high_watermark == 3
    assert lg.epochs.entries == [(0, 0)]
    assert lg.end_offset_for_epoch(0) == (0, 3)
    assert lg.end_offset_for_epoch(3) == (-1, -1)  # newer than anything left
    reopened = Log.open(lg.dir, lg.config, clean_shutdown=False)
    assert reopened.log_end_offset == 3 and reopened.epochs.entries == [(0, 0)]


def test_end_offset_for_epoch_follows_kafkas_rules(tmp_path: Path) -> None:
    lg = leader_with(tmp_path / "t-0", [(2, 2), (4, 3), (4, 1), (7, 2)])  # epochs 2@0, 4@2, 7@6; LEO 8
    assert lg.end_offset_for_epoch(7) == (7, 8)    # latest epoch: the log end
    assert lg.end_offset_for_epoch(4) == (4, 6)    # start of the next higher epoch
    assert lg.end_offset_for_epoch(5) == (4, 6)    # unknown epoch in a gap: the floor epoch answers
    assert lg.end_offset_for_epoch(1) == (1, 0)    # older than all: ends where the first begins
    assert lg.end_offset_for_epoch(8) == (-1, -1)  # newer than all: undefined
    assert lg.end_offset_for_epoch(-1) == (-1, -1)


def test_replication_and_recovery_checkpoints_in_kafkas_format(tmp_path: Path) -> None:
    write_replication_offset_checkpoint(tmp_path, {("orders", 1): 42, ("a-b", 0): 7})
    assert (tmp_path / "replication-offset-checkpoint").read_text() == "0\n2\na-b 0 7\norders 1 42\n"
    assert read_replication_offset_checkpoint(tmp_path) == {("orders", 1): 42, ("a-b", 0): 7}
    write_recovery_point_checkpoint(tmp_path, {("x", 3): 9})
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\nx 3 9\n"
    assert read_recovery_point_checkpoint(tmp_path) == {("x", 3): 9}
    assert read_replication_offset_checkpoint(tmp_path / "nowhere") == {}
    assert not list(tmp_path.glob("*.tmp"))


def test_truncate_fully_and_start_at_forgets_the_old_log(tmp_path: Path) -> None:
    lg = open_log(tmp_path / "t-0")
    lg.append(make_batch([b"a", b"b"], producer_id=3, epoch=0, seq=0, transactional=True), leader_epoch=1, now_ms=1)
    lg.roll()
    lg.high_watermark = 2
    lg.truncate_fully_and_start_at(100)  # the leader's log now starts past everything we had
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark) == (100, 100, 100)
    assert lg.epochs.entries == [] and lg.ongoing_transactions() == {} and lg.producer(3) is None
    leader = open_log(tmp_path / "l" / "t-0")
    leader.truncate_fully_and_start_at(100)
    leader.append(make_batch([b"c"]), leader_epoch=4, now_ms=1)
    lg.append_as_follower(fetch_all(leader, 100), now_ms=1)
    assert records(lg, 100) == [(100, None, b"c")] and lg.epochs.entries == [(4, 100)]
    lg.close()
    reopened = Log.open(lg.dir, lg.config, clean_shutdown=False)
    assert reopened.log_start_offset == 100 and reopened.producer(3) is None
    assert reopened.epochs.entries == [(4, 100)]
