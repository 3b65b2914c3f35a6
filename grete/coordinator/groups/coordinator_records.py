"""What the heartbeat-driven groups' ``__consumer_offsets`` records share (KIP-848 consumer groups:
consumer_records, KIP-1071 streams groups: streams_records, KIP-932 share groups: share_records):
a key is an int16 record type then the group id and, for a member's records, the member id, as
classic strings; a value is an int16 version (0) then the value struct in the flexible encoding.
"""

from __future__ import annotations

from collections.abc import Iterable

from grete.coordinator.groups.group_store import Record
from grete.protocol.codec import Reader, Writer
from grete.protocol.errors import ProtocolError

__all__ = ["Record", "key", "latest_by_key", "typed_key", "value_writer"]
ParsedKey = tuple[int, str, str | None]  # (record type, group id, member id or None)


def key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    w = Writer()
    w.int16(record_type)
    w.string(group_id, False)
    if member_id is not None:
        w.string(member_id, False)
    return w.getvalue()


def typed_key(data: bytes, record_types: frozenset[int]) -> ParsedKey | None:
    """(record type, group id, second string) of a key of one of ``record_types``; None for others."""
    r = Reader(data)
    record_type = r.int16()
    if record_type not in record_types:
        return None
    group_id = r.string(False)
    return record_type, group_id, r.string(False) if r.remaining() else None


def value_writer() -> Writer:
    """A writer with the value's version (0) written."""
    w = Writer()
    w.int16(0)
    return w


def latest_by_key(records: Iterable[Record], record_types: frozenset[int]) -> dict[bytes, tuple[ParsedKey, bytes | None]]:
    """The last record of each key of these types, in the order of those last writes (a tombstone
    is kept as a None value: it deletes what came before)."""
    found: dict[bytes, tuple[ParsedKey, bytes | None]] = {}
    for k, v in records:
        try:
            parsed = typed_key(k, record_types)
        except ProtocolError:
            continue  # group_loader logs unreadable keys; they are not these groups' state
        if parsed is not None:
            found.pop(k, None)
            found[k] = (parsed, v)
    return found
