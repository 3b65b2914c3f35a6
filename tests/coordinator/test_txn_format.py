"""``__transaction_state`` records: byte layouts written out by hand from Kafka's schema, round trips,
the flexible version 1 Kafka 4.x may write, and unreadable input."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grete.coordinator.transactions.txn_format import (
    FormatError,
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def test_key_layout() -> None:
    assert encode_key("tx") == b"\x00\x00" + b"\x00\x02tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == "tx"


def test_value_v0_layout() -> None:
    value = TxnLogValue(7, 3, 60000, TxnState.ONGOING, (("b", 1), ("a", 0), ("b", 0)), 1000, 900)
    expected = (struct.pack(">hqhib", 0, 7, 3, 60000, 1)
                + struct.pack(">i", 2)
                + struct.pack(">h", 1) + b"a" + struct.pack(">ii", 1, 0)
                + struct.pack(">h", 1) + b"b" + struct.pack(">iii", 2, 0, 1)
                + struct.pack(">qq", 1000, 900))
    assert encode_value(value) == expected
    assert decode_value(expected) == TxnLogValue(7, 3, 60000, TxnState.ONGOING, (("a", 0), ("b", 0), ("b", 1)),
                                                 1000, 900)


def test_value_v1_flexible_is_read() -> None:
    # Compact array/string lengths are length+1 varints; each struct ends with its tagged fields.
    data = (struct.pack(">hqhib", 1, 9, 0, 1000, 4)
            + bytes([2]) + bytes([2]) + b"t" + bytes([2]) + struct.pack(">i", 5) + bytes([0])
            + struct.pack(">qq", 20, 10)
            + bytes([1, 2, 2]) + struct.pack(">h", 2))  # tag 2 (ClientTransactionVersion) = 2
    assert decode_value(data) == TxnLogValue(9, 0, 1000, TxnState.COMPLETE_COMMIT, (("t", 5),), 20, 10,
                                             client_transaction_version=2)


def test_value_v1_is_written_for_transaction_version_2() -> None:
    """Kafka's flexible layout, tagged fields only where not the default (PreviousProducerId 0,
    NextProducerId 1, ClientTransactionVersion 2)."""
    value = TxnLogValue(9, 3, 1000, TxnState.PREPARE_COMMIT, (("t", 1), ("t", 5)), 20, 10,
                        next_producer_id=77, client_transaction_version=2)
    expected = (struct.pack(">hqhib", 1, 9, 3, 1000, 2)
                + bytes([2]) + bytes([2]) + b"t" + bytes([3]) + struct.pack(">ii", 1, 5) + bytes([0])
                + struct.pack(">qq", 20, 10)
                + bytes([2, 1, 8]) + struct.pack(">q", 77) + bytes([2, 2]) + struct.pack(">h", 2))
    assert encode_value(value) == expected
    assert decode_value(expected) == value
    tv1 = TxnLogValue(9, 3, 1000, TxnState.ONGOING, (("t", 1),), 20, 10)
    assert encode_value(tv1)[:2] == struct.pack(">h", 0)  # version 1 clients keep the v0 layout


def test_null_partition_list_reads_as_empty() -> None:
    data = struct.pack(">hqhibiqq", 0, 1, 0, 100, 0, -1, 5, -1)
    assert decode_value(data).partitions == ()


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x05" + b"\x00" * 40, struct.pack(">hqhib", 0, 1, 0, 1, 99)
                                  + struct.pack(">iqq", 0, 0, 0), b"\x00\x00\x00\x00\x7f\xff\xff\xff"])
def test_unreadable_values_raise_format_error(data: bytes) -> None:
    with pytest.raises(FormatError):
        decode_value(data)


@pytest.mark.parametrize("data", [b"", b"\x00\x01\x00\x01a", b"\x00\x00\x00\x09ab"])
def test_unreadable_keys_raise_format_error(data: bytes) -> None:
    with pytest.raises(FormatError):
        decode_key(data)


def test_state_names_are_kafkas() -> None:
    assert [s.kafka_name for s in TxnState] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort",
                                                "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert TxnState.from_kafka_name("ongoing") is TxnState.ONGOING
    assert TxnState.from_kafka_name("Bogus") is None


names = st.text(alphabet="abcxyz-_.", min_size=1, max_size=20)


@given(pid=st.integers(0, 2**63 - 1), epoch=st.integers(0, 32767), timeout=st.integers(1, 2**31 - 1),
       state=st.sampled_from(list(TxnState)), parts=st.sets(st.tuples(names, st.integers(0, 2**31 - 1)), max_size=8),
       times=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**62)), txn_id=names)
def test_round_trip(pid: int, epoch: int, timeout: int, state: TxnState, parts: set[tuple[str, int]],
                    times: tuple[int, int], txn_id: str) -> None:
    value = TxnLogValue(pid, epoch, timeout, state, tuple(sorted(parts)), *times)
    assert decode_value(encode_value(value)) == value
    assert decode_key(encode_key(txn_id)) == txn_id
