"""Kafka's record format for the ``__consumer_offsets`` topic: keys and values as raw bytes.

Every record key starts with an int16 *key version* that says what the record is:

* 0 or 1 -- OffsetCommitKey: group (string), topic (string), partition (int32)
* 2      -- GroupMetadataKey: group (string)
* 3+     -- records of the KIP-848 consumer protocol, share groups and so on: not classic groups,
  so ``decode_key`` answers ``None`` and the loader skips them.

Every value starts with an int16 *value version* followed by that version's fields:

* OffsetCommitValue v0-v4: offset int64, leaderEpoch int32 (v3+), metadata string,
  commitTimestamp int64, expireTimestamp int64 (v1 only). v4 is flexible (compact strings,
  tagged fields).
* GroupMetadataValue v0-v4: protocolType, generation, protocol (nullable), leader (nullable),
  currentStateTimestamp (v2+), members[memberId, groupInstanceId (v3+), clientId, clientHost,
  rebalanceTimeout (v1+), sessionTimeout, subscription bytes, assignment bytes]. v4 is flexible.

We write what Kafka 3.x writes: key version 1 for offsets, OffsetCommitValue v3 (v1 when an explicit
expire timestamp must be kept), key version 2 and GroupMetadataValue v3, so Kafka's tools (for example
``kafka-console-consumer --formatter ...OffsetsMessageFormatter``) can read our topic.
A ``None`` value is a tombstone: compaction deletes the key.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class FormatError(ValueError):
    """The bytes are not a valid record of the version they announce."""


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only stored by value version 1


@dataclass(frozen=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberValue, ...] = field(default_factory=tuple)


# ----------------------------------------------------------------------------------------- writing


class _Writer:
    """Appends Kafka primitive types; ``flexible`` switches strings/bytes/arrays to compact forms."""

    def __init__(self, flexible: bool = False) -> None:
        self.buf = bytearray()
        self.flexible = flexible

    def i16(self, v: int) -> None:
        self.buf += _I16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _I32.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _I64.pack(v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)

    def _length(self, n: int | None) -> None:
        # Compact forms store length+1 so that 0 can mean null.
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
        else:
            self.i16(-1 if n is None else n)

    def string(self, s: str | None) -> None:
        if s is None:
            self._length(None)
            return
        data = s.encode()
        self._length(len(data))
        self.buf += data

    def bytes_(self, b: bytes) -> None:
        if self.flexible:
            self.uvarint(len(b) + 1)
        else:
            self.i32(len(b))
        self.buf += b

    def array_len(self, n: int) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        else:
            self.i32(n)

    def no_tags(self) -> None:
        if self.flexible:
            self.uvarint(0)


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer()
    w.i16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return bytes(w.buf)


def encode_group_key(group: str) -> bytes:
    w = _Writer()
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return bytes(w.buf)


def offset_value_version(value: OffsetValue) -> int:
    """The version Kafka 3.x picks: v1 keeps an explicit expire timestamp, v3 otherwise."""
    return OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp >= 0 else OFFSET_COMMIT_VALUE_VERSION


def encode_offset_value(value: OffsetValue, version: int | None = None) -> bytes:
    version = offset_value_version(value) if version is None else version
    if not 0 <= version <= 4:
        raise ValueError(f"OffsetCommitValue version {version} is not supported")
    w = _Writer(flexible=version >= 4)
    w.i16(version)
    w.i64(value.offset)
    if version >= 3:
        w.i32(value.leader_epoch)
    w.string(value.metadata)
    w.i64(value.commit_timestamp)
    if version == 1:
        w.i64(value.expire_timestamp)
    w.no_tags()
    return bytes(w.buf)


def encode_group_value(value: GroupValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    if not 0 <= version <= 4:
        raise ValueError(f"GroupMetadataValue version {version} is not supported")
    w = _Writer(flexible=version >= 4)
    w.i16(version)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.i64(value.current_state_timestamp)
    w.array_len(len(value.members))
    for m in value.members:
        _encode_member(w, m, version)
    w.no_tags()
    return bytes(w.buf)


def _encode_member(w: _Writer, m: MemberValue, version: int) -> None:
    w.string(m.member_id)
    if version >= 3:
        w.string(m.group_instance_id)
    w.string(m.client_id)
    w.string(m.client_host)
    if version >= 1:
        w.i32(m.rebalance_timeout)
    w.i32(m.session_timeout)
    w.bytes_(m.subscription)
    w.bytes_(m.assignment)
    w.no_tags()


# ----------------------------------------------------------------------------------------- reading


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = memoryview(data)
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise FormatError(f"truncated record: need {n} bytes at {self.pos} of {len(self.data)}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            b = self._take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise FormatError("varint too long")

    def _length(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.i16()

    def nullable_string(self) -> str | None:
        n = self._length()
        if n < 0:
            return None
        try:
            return bytes(self._take(n)).decode()
        except UnicodeDecodeError as exc:
            raise FormatError("string is not UTF-8") from exc

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise FormatError("null in a non-nullable string field")
        return s

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise FormatError("null in a non-nullable bytes field")
        return bytes(self._take(n))

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.i32()
        if n < 0:
            raise FormatError("null in a non-nullable array field")
        return n

    def skip_tags(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise FormatError(f"{len(self.data) - self.pos} trailing bytes")


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """Decode a record key; ``None`` for record types that are not classic-group state."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        key: OffsetKey | GroupKey = OffsetKey(r.string(), r.string(), r.i32())
    elif version == 2:
        key = GroupKey(r.string())
    else:
        return None
    r.end()
    return key


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise FormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.i64()
    expire_ts = r.i64() if version == 1 else -1
    r.skip_tags()
    r.end()
    return OffsetValue(offset, leader_epoch, metadata, commit_ts, expire_ts)


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise FormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.i64() if version >= 2 else -1
    members = tuple(_decode_member(r, version) for _ in range(r.array_len()))
    r.skip_tags()
    r.end()
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, members)


def _decode_member(r: _Reader, version: int) -> MemberValue:
    member_id = r.string()
    instance_id = r.nullable_string() if version >= 3 else None
    client_id = r.string()
    client_host = r.string()
    rebalance_timeout = r.i32() if version >= 1 else None
    session_timeout = r.i32()
    if rebalance_timeout is None:
        # v0 had no rebalance timeout: clients then used the session timeout for both.
        rebalance_timeout = session_timeout
    subscription = r.bytes_()
    assignment = r.bytes_()
    r.skip_tags()
    return MemberValue(member_id, instance_id, client_id, client_host, rebalance_timeout, session_timeout,
                       subscription, assignment)


# ------------------------------------------------------------- consumer protocol subscriptions


def subscription_topics(metadata: bytes) -> set[str] | None:
    """Topics in a ConsumerProtocolSubscription (protocol type "consumer"), or None if unreadable.

    Every version (0-3) starts with int16 version then topics as an int32-counted array of int16
    strings; the later fields (user data, owned partitions, generation, rack) are not needed here.
    """
    try:
        r = _Reader(metadata)
        if r.i16() < 0:
            return None
        return {r.string() for _ in range(r.array_len())}
    except FormatError:
        return None


def partition_for(group_id: str, partitions: int) -> int:
    """``Utils.abs(groupId.hashCode()) % partitions`` with Java's String.hashCode over UTF-16 units."""
    h = 0
    units = group_id.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 0x100000000
    # Kafka's Utils.abs maps Integer.MIN_VALUE to 0 instead of overflowing.
    h = 0 if h == -0x80000000 else abs(h)
    return h % partitions
