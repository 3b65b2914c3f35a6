"""Read a replica's partition straight from its segment files (Kafka's on-disk format, record
batch v2), independently of the broker: the checker compares replicas offset by offset.

Written from the format's description (Kafka's documentation, "Record Batch"), not from grete's
decoder, so that a bug in grete's decoding cannot hide in both. Uncompressed batches only (the
workload's producers send uncompressed records); control batches (transaction markers) and
compressed batches are skipped, the latter counted.
"""

from __future__ import annotations

import struct
from pathlib import Path

HEADER = 61  # bytes of a v2 batch header before its records
COMPRESSION_MASK = 0x07
CONTROL_MASK = 0x20


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


def batch_records(buf: bytes, pos: int) -> list[tuple[int, bytes | None]]:
    """(offset, value) of each record of the batch at ``pos``."""
    base_offset, = struct.unpack_from(">q", buf, pos)
    count, = struct.unpack_from(">i", buf, pos + 57)
    at = pos + HEADER
    out = []
    for _ in range(count):
        _length, at = _varint(buf, at)
        at += 1  # attributes
        _ts, at = _varint(buf, at)
        offset_delta, at = _varint(buf, at)
        key_len, at = _varint(buf, at)
        at += max(key_len, 0)
        value_len, at = _varint(buf, at)
        value = None if value_len < 0 else bytes(buf[at:at + value_len])
        at += max(value_len, 0)
        headers, at = _varint(buf, at)
        for _ in range(headers):
            hk, at = _varint(buf, at)
            at += hk
            hv, at = _varint(buf, at)
            at += max(hv, 0)
        out.append((base_offset + offset_delta, value))
    return out


def read_partition_dir(directory: Path) -> tuple[list[tuple[int, str]], int]:
    """(offset, value) of every data record in the partition directory, and how many compressed
    batches were skipped. A torn batch at a segment's end (a killed broker) ends that segment."""
    records: list[tuple[int, str]] = []
    skipped = 0
    for segment in sorted(directory.glob("*.log")):
        buf = segment.read_bytes()
        pos = 0
        while pos + HEADER <= len(buf):
            length, = struct.unpack_from(">i", buf, pos + 8)
            end = pos + 12 + length
            if length <= 0 or end > len(buf) or buf[pos + 16] != 2:
                break
            attributes, = struct.unpack_from(">h", buf, pos + 21)
            if attributes & CONTROL_MASK:
                pass
            elif attributes & COMPRESSION_MASK:
                skipped += 1
            else:
                try:
                    records += [(o, v.decode(errors="replace")) for o, v in batch_records(buf, pos) if v is not None]
                except (IndexError, struct.error):
                    break
            pos = end
    return records, skipped


def batches_with(directory: Path, values: set[str]) -> list[str]:
    """The headers of the batches holding any of ``values`` (base offset, partition leader epoch,
    producer id/epoch, base sequence): how a duplicate got in, e.g. under two producer epochs."""
    out = []
    for segment in sorted(directory.glob("*.log")):
        buf = segment.read_bytes()
        pos = 0
        while pos + HEADER <= len(buf):
            length, = struct.unpack_from(">i", buf, pos + 8)
            end = pos + 12 + length
            if length <= 0 or end > len(buf) or buf[pos + 16] != 2:
                break
            attributes, = struct.unpack_from(">h", buf, pos + 21)
            if not attributes & (CONTROL_MASK | COMPRESSION_MASK):
                records = batch_records(buf, pos)
                hits = [f"{o}:{v.decode()}" for o, v in records if v is not None and v.decode() in values]
                if hits:
                    epoch, = struct.unpack_from(">i", buf, pos + 12)
                    pid, pepoch, seq = struct.unpack_from(">qhi", buf, pos + 43)
                    out.append(f"{segment.name} batch offsets {records[0][0]}-{records[-1][0]} leader epoch {epoch} "
                               f"producer {pid} epoch {pepoch} base sequence {seq}: {hits}")
            pos = end
    return out


if __name__ == "__main__":
    import sys

    for line in batches_with(Path(sys.argv[1]), set(sys.argv[2:])):
        print(line)
