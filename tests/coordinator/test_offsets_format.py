"""The __consumer_offsets key/value byte format (Kafka's OffsetCommit*/GroupMetadata* schemas)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from grete.coordinator.groups.offsets_format import (
    FormatError,
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
    subscription_topics,
)
from tests.coordinator._support import subscription

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(max_size=40)


def _kstr(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def test_keys_are_laid_out_as_kafka_schemas_say() -> None:
    # OffsetCommitKey: int16 version 1, group, topic, int32 partition.
    assert encode_offset_key("grp", "tp", 7) == b"\x00\x01" + _kstr("grp") + _kstr("tp") + b"\x00\x00\x00\x07"
    # GroupMetadataKey: int16 version 2, group.
    assert encode_group_key("grp") == b"\x00\x02" + _kstr("grp")
    # Kafka 0.8.2-era offset keys used version 0 with the same fields.
    assert decode_key(b"\x00\x00" + _kstr("g") + _kstr("t") + b"\x00\x00\x00\x01") == OffsetKey("g", "t", 1)
    # Newer record types (consumer-protocol groups, share groups...) are not ours to read.
    assert decode_key(b"\x00\x03" + _kstr("g")) is None


def test_offset_value_v3_layout() -> None:
    data = encode_offset_value(OffsetValue(100, 5, "md", 1234))
    assert data == (b"\x00\x03" + struct.pack(">qi", 100, 5) + _kstr("md") + struct.pack(">q", 1234))
    # An explicit expire timestamp can only be stored by v1 (no leader epoch there).
    v1 = encode_offset_value(OffsetValue(100, 5, "md", 1234, 9999))
    assert v1 == b"\x00\x01" + struct.pack(">q", 100) + _kstr("md") + struct.pack(">qq", 1234, 9999)
    assert decode_offset_value(v1) == OffsetValue(100, -1, "md", 1234, 9999)


def test_flexible_v4_values_decode_with_unknown_tagged_fields() -> None:
    # OffsetCommitValue v4: compact string (len+1) and a tagged-field section; skip unknown tags.
    data = (b"\x00\x04" + struct.pack(">qi", 9, 2) + b"\x03md" + struct.pack(">q", 77)
            + b"\x01" + b"\x05" + b"\x02" + b"zz")
    assert decode_offset_value(data) == OffsetValue(9, 2, "md", 77)


def test_group_value_v3_layout() -> None:
    member = MemberValue("m-1", "inst", "cid", "/1.2.3.4", 300, 100, b"S", b"AS")
    data = encode_group_value(GroupValue("consumer", 4, "range", "m-1", 555, (member,)))
    expected = (b"\x00\x03" + _kstr("consumer") + struct.pack(">i", 4) + _kstr("range") + _kstr("m-1")
                + struct.pack(">q", 555) + struct.pack(">i", 1)
                + _kstr("m-1") + _kstr("inst") + _kstr("cid") + _kstr("/1.2.3.4") + struct.pack(">ii", 300, 100)
                + struct.pack(">i", 1) + b"S" + struct.pack(">i", 2) + b"AS")
    assert data == expected


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    data = encode_group_value(GroupValue("consumer", 2, None, None, 1))
    assert data == b"\x00\x03" + _kstr("consumer") + struct.pack(">i", 2) + b"\xff\xff\xff\xff" + \
        struct.pack(">q", 1) + struct.pack(">i", 0)


def test_v0_group_member_uses_session_timeout_as_rebalance_timeout() -> None:
    member = MemberValue("m", None, "c", "h", 999, 100, b"", b"")
    decoded = decode_group_value(encode_group_value(GroupValue("consumer", 1, "range", "m", -1, (member,)), 0))
    assert decoded.members[0].rebalance_timeout == 100


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x03\x00", b"\x00\x09" + b"\x00" * 30,
                                  encode_offset_value(OffsetValue(1)) + b"\x00"])
def test_malformed_values_raise_format_error(data: bytes) -> None:
    with pytest.raises(FormatError):
        decode_offset_value(data)


def test_partition_for_matches_java_string_hashcode() -> None:
    # "hello".hashCode() == 99162322; "polygenelubricants".hashCode() == Integer.MIN_VALUE, which
    # Kafka's Utils.abs maps to 0; "Aa" and "BB" collide (2112).
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("Aa", 50) == partition_for("BB", 50) == 2112 % 50
    # Others (negative hashes, non-ASCII, surrogate pairs) against the textbook recurrence
    # s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, in 32-bit two's complement.
    for s in ["zzzzzzzzzzzz", "grüße", "🙂-group", ""]:
        raw = s.encode("utf-16-be")
        units = [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]
        h = sum(c * 31 ** (len(units) - 1 - i) for i, c in enumerate(units)) % 2**32
        signed = h - 2**32 if h >= 2**31 else h
        assert partition_for(s, 50) == abs(signed) % 50


def test_subscription_topics() -> None:
    for version in range(4):
        assert subscription_topics(subscription("a", "b", version=version)) == {"a", "b"}
    assert subscription_topics(b"\x00") is None
    assert subscription_topics(b"garbage-not-a-subscription") is None


members = st.builds(MemberValue, TEXT, st.none() | TEXT, TEXT, TEXT, INT32, INT32, st.binary(max_size=50),
                    st.binary(max_size=50))


@given(st.builds(OffsetKey, TEXT, TEXT, INT32))
def test_offset_key_roundtrip(key: OffsetKey) -> None:
    assert decode_key(encode_offset_key(key.group, key.topic, key.partition)) == key


@given(TEXT)
def test_group_key_roundtrip(group: str) -> None:
    assert decode_key(encode_group_key(group)) == GroupKey(group)


@given(st.builds(OffsetValue, INT64, INT32, TEXT, INT64, INT64), st.integers(0, 4))
def test_offset_value_roundtrip_every_version(value: OffsetValue, version: int) -> None:
    decoded = decode_offset_value(encode_offset_value(value, version))
    assert decoded.offset == value.offset and decoded.metadata == value.metadata
    assert decoded.commit_timestamp == value.commit_timestamp
    assert decoded.leader_epoch == (value.leader_epoch if version >= 3 else -1)
    assert decoded.expire_timestamp == (value.expire_timestamp if version == 1 else -1)


@given(st.builds(GroupValue, TEXT, INT32, st.none() | TEXT, st.none() | TEXT, INT64,
                 st.lists(members, max_size=4).map(tuple)), st.integers(0, 4))
def test_group_value_roundtrip_every_version(value: GroupValue, version: int) -> None:
    decoded = decode_group_value(encode_group_value(value, version))
    assert (decoded.protocol_type, decoded.generation, decoded.protocol, decoded.leader) == (
        value.protocol_type, value.generation, value.protocol, value.leader)
    assert decoded.current_state_timestamp == (value.current_state_timestamp if version >= 2 else -1)
    assert len(decoded.members) == len(value.members)
    for got, sent in zip(decoded.members, value.members, strict=True):
        assert (got.member_id, got.client_id, got.client_host, got.session_timeout, got.subscription,
                got.assignment) == (sent.member_id, sent.client_id, sent.client_host, sent.session_timeout,
                                    sent.subscription, sent.assignment)
        assert got.group_instance_id == (sent.group_instance_id if version >= 3 else None)
        assert got.rebalance_timeout == (sent.rebalance_timeout if version >= 1 else sent.session_timeout)


@given(st.binary(max_size=200))
def test_decoders_never_fail_with_anything_but_format_error(data: bytes) -> None:
    for decode in (decode_key, decode_offset_value, decode_group_value):
        try:
            decode(data)
        except FormatError:
            pass
