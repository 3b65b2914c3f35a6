"""``meta.properties``, the file naming the cluster and node a log directory belongs to, as Kafka's
MetaProperties reads and writes it.

Version 0 (ZooKeeper mode): ``broker.id`` (optional) and ``cluster.id``. Version 1 (KRaft):
``node.id`` and ``cluster.id`` (both required) and, since Kafka 3.7, ``directory.id``: a random Uuid
in Kafka's URL-safe base64 form. Kafka writes the file with ``java.util.Properties.store``: a blank
comment, a date comment, then the keys in the order its hash table iterates them (emulated here, so
the bytes match); it reads it with ``Properties.load`` (ISO-8859-1, ``\\`` escapes, ``=``, ``:`` or
blank as the separator).
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from grete.storage.files import META_PROPERTIES, atomic_write, uuid_to_kafka

VERSION_PROP: Final = "version"
CLUSTER_ID_PROP: Final = "cluster.id"
BROKER_ID_PROP: Final = "broker.id"
NODE_ID_PROP: Final = "node.id"
DIRECTORY_ID_PROP: Final = "directory.id"
V0: Final = 0
V1: Final = 1
# Kafka's DirectoryId: ids with zero high bits and low bits below 100 are reserved (UNASSIGNED,
# LOST, MIGRATING, ...), never a directory's own.
_RESERVED_BELOW: Final = 100


class MetaPropertiesError(Exception):
    """A meta.properties file Kafka would refuse; the message names the file and Kafka's reason."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(message)
        self.path = str(path)


@dataclass(frozen=True, slots=True)
class MetaProperties:
    version: int
    cluster_id: str | None = None
    node_id: int | None = None
    directory_id: uuid.UUID | None = None

    def __post_init__(self) -> None:
        if self.version not in (V0, V1):
            raise ValueError(f"Unknown meta.properties version number {self.version}")
        if self.version == V1 and self.cluster_id is None:
            raise ValueError("cluster.id was not found.")
        if self.version == V1 and self.node_id is None:
            raise ValueError("node.id was not found.")

    def to_properties(self) -> dict[str, str]:
        """The keys Kafka writes, in the order its MetaProperties.toProperties puts them."""
        props = {VERSION_PROP: str(self.version)}
        if self.cluster_id is not None:
            props[CLUSTER_ID_PROP] = self.cluster_id
        if self.node_id is not None:
            props[BROKER_ID_PROP if self.version == V0 else NODE_ID_PROP] = str(self.node_id)
        if self.directory_id is not None:
            props[DIRECTORY_ID_PROP] = uuid_to_kafka(self.directory_id)
        return props

    def describe(self) -> str:
        """``{cluster.id=..., node.id=1, version=1}``: what ``kafka-storage info`` prints (sorted keys)."""
        props = self.to_properties()
        return "{" + ", ".join(f"{k}={props[k]}" for k in sorted(props)) + "}"


def from_properties(props: Mapping[str, str]) -> MetaProperties:
    """Kafka's MetaProperties.Builder(Properties).build(); raises ValueError with Kafka's reason."""
    version_text = props.get(VERSION_PROP, str(V0))
    version = _int(version_text, VERSION_PROP)
    if version not in (V0, V1):
        raise ValueError(f"Unknown meta.properties version number {version}")
    node_key = BROKER_ID_PROP if version == V0 else NODE_ID_PROP
    node_id: int | None = None
    if node_key in props:
        node_id = _int(props[node_key], node_key)
    elif version != V0:
        raise ValueError(f"Failed to find {node_key}")
    directory_id = None
    if DIRECTORY_ID_PROP in props:
        directory_id = _kafka_uuid(props[DIRECTORY_ID_PROP])
    return MetaProperties(version, props.get(CLUSTER_ID_PROP), node_id, directory_id)


def _int(text: str, key: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise ValueError(f"Unable to read {key} as a base-10 number.") from None
    if not -2**31 <= value < 2**31:
        raise ValueError(f"Unable to read {key} as a base-10 number.")
    return value


def _kafka_uuid(text: str) -> uuid.UUID:
    try:
        return parse_uuid(text)
    except ValueError as exc:
        raise ValueError(f"Unable to read {DIRECTORY_ID_PROP} as a Uuid: {exc}") from None


def parse_uuid(text: str) -> uuid.UUID:
    """Kafka's Uuid.fromString: exactly 16 bytes of URL-safe base64; ValueError with its messages."""
    if len(text) > 24:
        raise ValueError(f"Input string with prefix `{text[:24]}` is too long to be decoded as a base64 UUID")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if len(raw) != 16:
        raise ValueError(f"Input string `{text}` decoded as {len(raw)} bytes, which is not equal to the "
                         "expected 16 bytes of a base64-encoded UUID")
    return uuid.UUID(bytes=raw)


def read_meta_properties(directory: Path) -> MetaProperties | None:
    """The directory's meta.properties; None when it has none. Raises MetaPropertiesError (with the
    file's path) for a file Kafka cannot read or would refuse, OSError when it cannot be read."""
    path = directory / META_PROPERTIES
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return from_properties(load_properties(data.decode("latin-1")))
    except ValueError as exc:
        raise MetaPropertiesError(path, f"Error loading {path}: {exc}") from None


def write_meta_properties(directory: Path, meta: MetaProperties, *, now: float | None = None) -> None:
    """Replace the directory's meta.properties atomically, fsynced, as Kafka writes it."""
    text = store_properties(meta.to_properties(), now=now)
    atomic_write(directory / META_PROPERTIES, text.encode("utf-8"))


def new_directory_id(taken: Iterable[uuid.UUID] = ()) -> uuid.UUID:
    """A random directory id as Kafka's Copier.generateValidDirectoryId picks one: any 128 random
    bits, but never base64 starting with '-', a reserved id, or one already taken."""
    used = set(taken)
    while True:
        candidate = uuid.UUID(bytes=os.urandom(16))
        reserved = candidate.int >> 64 == 0 and candidate.int < _RESERVED_BELOW
        if not (uuid_to_kafka(candidate).startswith("-") or reserved or candidate in used):
            return candidate


def check_ensemble(metas: Mapping[Path, MetaProperties], cluster_id: str | None,
                   node_id: int | None) -> None:
    """Kafka's MetaPropertiesEnsemble.verify over formatted directories (in path order): one
    cluster id, one node id, no duplicate or reserved directory id. Raises MetaPropertiesError."""
    seen: dict[uuid.UUID, Path] = {}
    for directory in sorted(metas, key=str):
        meta, path = metas[directory], directory / META_PROPERTIES
        if meta.cluster_id is not None:
            if cluster_id is None:
                cluster_id = meta.cluster_id
            elif meta.cluster_id != cluster_id:
                raise MetaPropertiesError(path, f"Invalid cluster.id in: {path}. Expected {cluster_id}, "
                                            f"but read {meta.cluster_id}")
        if meta.node_id is not None:
            if node_id is None:
                node_id = meta.node_id
            elif meta.node_id != node_id:
                raise MetaPropertiesError(path, f"Stored node id {meta.node_id} doesn't match previous node id "
                                            f"{node_id} in {path}. If you moved your data, make sure your "
                                            "configured node id matches. If you intend to create a new node, "
                                            "you should remove all data in your data directories.")
        if meta.directory_id is not None:
            _check_directory_id(meta.directory_id, directory, seen)


def _check_directory_id(directory_id: uuid.UUID, directory: Path, seen: dict[uuid.UUID, Path]) -> None:
    text = uuid_to_kafka(directory_id)
    if directory_id.int >> 64 == 0 and directory_id.int < _RESERVED_BELOW:
        raise MetaPropertiesError(directory / META_PROPERTIES,
                              f"Invalid resrved directory ID {text} found in {directory}")
    previous = seen.setdefault(directory_id, directory)
    if previous != directory:
        raise MetaPropertiesError(directory / META_PROPERTIES,
                              f"Duplicate directory ID Optional[{text}] found. It was the ID of {previous}, "
                              f"but also of {directory}")


# --- java.util.Properties, as far as meta.properties needs it -------------------------------------

def store_properties(props: Mapping[str, str], *, now: float | None = None) -> str:
    """``Properties.store(writer, "")``: ``#``, the date, then the entries in the iteration order of
    Kafka's Properties (a 16-bucket hash table: by bucket, then insertion order)."""
    stamp = time.strftime("%a %b %d %H:%M:%S %Z %Y", time.localtime(now))
    lines = ["#", f"#{stamp}"]
    lines += [f"{_escape(key, True)}={_escape(props[key], False)}" for key in java_hash_order(props)]
    return "\n".join(lines) + "\n"


def java_hash_order(keys: Iterable[str], buckets: int = 16) -> list[str]:
    """The order a Java HashMap / ConcurrentHashMap of ``buckets`` bins iterates these string keys."""
    def bucket(key: str) -> int:
        h = java_string_hash(key)
        return (h ^ (h >> 16)) & (buckets - 1)
    return sorted(keys, key=bucket)  # sorted() is stable: insertion order within a bin


def java_string_hash(text: str) -> int:
    """Java's String.hashCode, as an unsigned 32-bit value."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


_ESCAPES: Final = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f",
                   "=": "\\=", ":": "\\:", "#": "\\#", "!": "\\!"}


def _escape(text: str, is_key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == " " and (is_key or i == 0):
            out.append("\\ ")
        else:
            out.append(_ESCAPES.get(ch, ch))
    return "".join(out)


def load_properties(text: str) -> dict[str, str]:
    """``Properties.load``: comments, continuation lines, ``=``/``:``/blank separators, escapes."""
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _logical_lines(text: str) -> list[str]:
    lines, pending = [], None
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = raw.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        line = line if pending is None else pending + line
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = line[:-1]
            continue
        pending = None
        lines.append(line)
    if pending:
        lines.append(pending)
    return lines


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in "=: \t\f":
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            out.append(chr(int(text[i + 2:i + 6], 16)))
            i += 6
            continue
        out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
        i += 2
    return "".join(out)
