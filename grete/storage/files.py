"""File names and small text files Kafka keeps next to its logs.

Every text file here is replaced atomically: write ``<name>.tmp``, fsync, rename over the old
one, fsync the directory. A reader therefore sees either the old or the new content.
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from grete.storage import io

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
TXN_INDEX_SUFFIX: Final = ".txnindex"
SNAPSHOT_SUFFIX: Final = ".snapshot"
DELETED_SUFFIX: Final = ".deleted"
CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
TMP_SUFFIX: Final = ".tmp"

CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT: Final = "log-start-offset-checkpoint"
REPLICATION_CHECKPOINT: Final = "replication-offset-checkpoint"
CLEANER_CHECKPOINT: Final = "cleaner-offset-checkpoint"
META_PROPERTIES: Final = "meta.properties"
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
PARTITION_METADATA: Final = "partition.metadata"

_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
_DELETE_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]{32}-delete$")
# Kafka's AlterReplicaLogDirs target while it is being copied: <topic>-<partition>.<uuid>-future
_FUTURE_DIR_RE = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]{32}-future$")
FUTURE_DIR_SUFFIX: Final = "-future"


def offset_name(offset: int) -> str:
    """Kafka names segment files by base offset, zero-padded to 20 digits."""
    return f"{offset:020d}"


def segment_file(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / (offset_name(base_offset) + suffix)


def parse_offset_name(name: str) -> int | None:
    """Base offset from '00000000000000000123.log[.swap]', or None for other files."""
    stem = name.split(".", 1)[0]
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    match = _DIR_RE.match(name)
    if match is None or "." in name.rsplit("-", 1)[1]:
        return None
    return match.group("topic"), int(match.group("partition"))


def is_deleted_dir(name: str) -> bool:
    return _DELETE_DIR_RE.match(name) is not None


def future_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def parse_future_dir(name: str) -> tuple[str, int] | None:
    match = _FUTURE_DIR_RE.match(name)
    return None if match is None else (match.group("topic"), int(match.group("partition")))


def uuid_to_kafka(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, no padding (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def uuid_from_kafka(text: str) -> uuid.UUID:
    padded = text.strip() + "=" * (-len(text.strip()) % 4)
    return uuid.UUID(bytes=base64.urlsafe_b64decode(padded))


def fsync_dir(directory: Path) -> None:
    fd = io.open(directory, os.O_RDONLY)
    try:
        io.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data``: readers see the old content or the new, never a mix.

    On any failure (disk full, I/O error, read-only or vanished directory) the temp file is
    removed, the previous version of ``path`` stays as it was, and an OSError naming ``path``
    (same errno, so the same subclass) is raised.
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        fd = io.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[io.write(fd, view):]
            if sync:
                io.fsync(fd)
        finally:
            os.close(fd)
        io.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise OSError(exc.errno, exc.strerror, str(path)) from exc
    if sync:
        try:
            fsync_dir(path.parent)
        except OSError as exc:  # the new version is in place; only its durability is in doubt
            raise OSError(exc.errno, exc.strerror, str(path)) from exc


def _discard(tmp: Path) -> None:
    try:
        os.unlink(tmp)  # not through io: cleaning up must not trip an injected fault again
    except OSError:
        pass  # never created, or its directory is gone


# --- checkpoint files: "version\ncount\nentry\n..." ----------------------------------------------

def write_checkpoint(path: Path, lines: Iterable[str], version: int = 0) -> None:
    entries = list(lines)
    text = f"{version}\n{len(entries)}\n" + "".join(line + "\n" for line in entries)
    atomic_write(path, text.encode("utf-8"))


def read_checkpoint(path: Path, version: int = 0) -> list[list[str]] | None:
    """Entries split on spaces, or None if absent; ValueError on a malformed file."""
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    lines = text.split("\n")
    if len(lines) < 2 or lines[0].strip() != str(version):
        raise ValueError(f"{path}: unsupported checkpoint version {lines[0]!r}")
    count = int(lines[1])
    entries = [line.split() for line in lines[2:2 + count]]
    if len(entries) != count or any(not e for e in entries):
        raise ValueError(f"{path}: expected {count} entries")
    return entries


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    write_checkpoint(path, (f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    try:
        entries = read_checkpoint(path)
    except (ValueError, IndexError):
        return {}  # Kafka treats a corrupt checkpoint as absent and falls back to recovery
    if entries is None:
        return {}
    return {(e[0], int(e[1])): int(e[2]) for e in entries if len(e) == 3}


# Kafka's per-log-dir offset checkpoints (same text form: "0\n<count>\n<topic> <partition> <offset>\n...").

def write_replication_offset_checkpoint(log_dir: Path, high_watermarks: Mapping[tuple[str, int], int]) -> None:
    """``replication-offset-checkpoint``: the high watermark of every partition in ``log_dir``."""
    write_offset_checkpoint(log_dir / REPLICATION_CHECKPOINT, high_watermarks)


def read_replication_offset_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    return read_offset_checkpoint(log_dir / REPLICATION_CHECKPOINT)


def write_recovery_point_checkpoint(log_dir: Path, recovery_points: Mapping[tuple[str, int], int]) -> None:
    """``recovery-point-offset-checkpoint``: below these offsets the logs were fsynced."""
    write_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, recovery_points)


def read_recovery_point_checkpoint(log_dir: Path) -> dict[tuple[str, int], int]:
    return read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)


# --- partition.metadata --------------------------------------------------------------------------

def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    text = f"version: 0\ntopic_id: {uuid_to_kafka(topic_id)}"
    atomic_write(directory / PARTITION_METADATA, text.encode("utf-8"))


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    try:
        text = (directory / PARTITION_METADATA).read_text("utf-8")
    except FileNotFoundError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    raw = fields.get("topic_id")
    return uuid_from_kafka(raw.strip()) if raw else None


# --- Java properties (meta.properties) -----------------------------------------------------------

def write_properties(path: Path, props: Mapping[str, str]) -> None:
    body = "#\n" + "".join(f"{k}={v}\n" for k, v in props.items())
    atomic_write(path, body.encode("utf-8"))


def read_properties(path: Path) -> dict[str, str] | None:
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!" or "=" not in line:
            continue
        key, value = line.split("=", 1)
        props[key.strip()] = value.strip()
    return props
