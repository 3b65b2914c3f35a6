"""The v2 batch header view: fields, iteration, patching and sequence arithmetic."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch

from grete.protocol.records.batch import (
    RecordBatch,
    increment_sequence,
    iter_batches,
    peek_batch_size,
    peek_magic,
)
from grete.protocol.records.legacy import LegacyRecord, encode_message_set
from grete.protocol.records.record import absolute_records, build_batch, simple_records


def _batch(n: int, base_offset: int = 0, **kwargs: Any) -> bytearray:
    return build_batch(simple_records([b"v%d" % i for i in range(n)], timestamp_step=2), base_offset=base_offset,
                       base_timestamp=1000, **kwargs)


def test_iter_batches_stops_at_a_truncated_tail() -> None:
    data = _batch(2) + _batch(3, base_offset=2) + _batch(1, base_offset=5)
    batches = list(iter_batches(data[:-10]))
    assert [(b.base_offset, b.records_count, b.next_offset) for b in batches] == [(0, 2, 2), (2, 3, 5)]
    assert [b.pos for b in batches] == [0, len(_batch(2))]
    assert [b.base_offset for b in iter_batches(data, pos=len(_batch(2)))] == [2, 5]


def test_peek_helpers_work_for_any_magic() -> None:
    v2 = _batch(1)
    legacy = encode_message_set([LegacyRecord(0, 5, None, b"x")], 1)
    assert peek_batch_size(v2, 0) == len(v2) and peek_magic(v2, 0) == 2
    assert peek_batch_size(legacy, 0) == len(legacy) and peek_magic(legacy, 0) == 1
    assert peek_batch_size(v2[:11], 0) is None


def test_patches_write_through_and_keep_the_crc_valid() -> None:
    buf = _batch(3, producer_id=4, producer_epoch=1, base_sequence=10)
    batch = RecordBatch(buf, 0)
    batch.set_base_offset(1_000)
    batch.set_partition_leader_epoch(9)
    assert batch.crc_ok()  # both fields are outside the CRC
    batch.set_log_append_time(123_456)
    fresh = RecordBatch(buf, 0)
    assert (fresh.base_offset, fresh.partition_leader_epoch, fresh.max_timestamp, fresh.timestamp_type) == (
        1_000, 9, 123_456, 1)
    assert fresh.crc_ok() and fresh.crc == batch.crc
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc()
    assert [(m.offset, m.timestamp) for m in theirs] == [(1000, 123_456), (1001, 123_456), (1002, 123_456)]
    assert [r.offset for r in absolute_records(fresh)] == [1000, 1001, 1002]


def test_header_fields_match_the_spec_offsets() -> None:
    buf = _batch(2, producer_id=77, producer_epoch=3, base_sequence=5, partition_leader_epoch=8)
    b = RecordBatch(buf, 0)
    assert struct.unpack_from(">qiib", buf, 0) == (b.base_offset, b.batch_length, b.partition_leader_epoch, 2)
    assert struct.unpack_from(">qhi", buf, 43) == (77, 3, 5)
    assert b.size == len(buf) and b.records_view.nbytes == len(buf) - 61


@pytest.mark.parametrize(("base", "inc", "expected"), [
    (0, 5, 5), (2**31 - 1, 1, 0), (2**31 - 3, 5, 2), (2**31 - 1, 0, 2**31 - 1)])
def test_increment_sequence_wraps_like_kafka(base: int, inc: int, expected: int) -> None:
    assert increment_sequence(base, inc) == expected


def test_last_sequence() -> None:
    assert RecordBatch(_batch(3, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2), 0).last_sequence == 0
    assert RecordBatch(_batch(3), 0).last_sequence == -1
