"""Drivers for the Go and JavaScript clients in compat-tests/ (franz-go, sarama, kafka-go, kafkajs).

Each client has one small program in its folder that takes ``-bootstrap HOST:PORT COMMAND -flag value ...``
and prints JSON lines. The Go programs are built once into the cache (keyed by a hash of their
sources, so a rebuild happens only when they change); the kafkajs script runs with ``node`` from its
folder's node_modules, which ``scripts/install-test-deps`` fills with ``npm ci``.

    driver = go_driver("franz-go")          # raises Unavailable (with the reason) when it cannot build
    lines = driver.ok(bootstrap, "produce", topic="t", count=10, codec="zstd")

    python -m tools.client_drivers build    # build every Go driver now (scripts/install-test-deps does)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GO_CLIENTS = ("franz-go", "sarama", "kafka-go")
COMPAT = REPO / "compat-tests"
CACHE = Path(os.environ.get("GRETE_CACHE", Path.home() / ".cache" / "grete"))


class Unavailable(Exception):
    """The client's toolchain or dependencies are missing; the message says what to do."""


def flags(options: dict[str, object]) -> list[str]:
    """``{"topic": "t", "headers": True, "idempotent": False}`` -> ``-topic t -headers -idempotent=false``."""
    out: list[str] = []
    for name, value in options.items():
        flag = "-" + name.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append(f"{flag}=false")
        elif value is not None:
            out += [flag, str(value)]
    return out


@dataclass
class Driver:
    name: str
    argv: list[str]  # the program, before -bootstrap
    cwd: Path

    def run(self, bootstrap: str, command: str, timeout: float = 120.0,
            **options: object) -> subprocess.CompletedProcess[str]:
        cmd = [*self.argv, "-bootstrap", bootstrap, command, *flags(options)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.cwd,
                              stdin=subprocess.DEVNULL)

    def ok(self, bootstrap: str, command: str, timeout: float = 120.0, **options: object) -> list[dict]:
        """Run a command, assert it exited 0, return its JSON lines."""
        done = self.run(bootstrap, command, timeout=timeout, **options)
        assert done.returncode == 0, (
            f"{self.name} {command} {' '.join(flags(options))} exited {done.returncode}\n"
            f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}")
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def source_hash(folder: Path, patterns: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for pattern in patterns:
        for path in sorted(folder.glob(pattern)):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def go_driver(folder: str) -> Driver:
    """Build (once, cached) the Go program in compat-tests/<folder>."""
    go = shutil.which("go")
    if go is None:
        raise Unavailable("no go toolchain on PATH (the Go client tests need Go 1.26)")
    src = COMPAT / folder
    binary = CACHE / "go-drivers" / f"{folder}-{source_hash(src, ('go.mod', 'go.sum', '*.go'))}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = binary.with_name(binary.name + f".tmp{os.getpid()}")
        done = subprocess.run([go, "build", "-buildvcs=false", "-o", str(tmp), "."], cwd=src, capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise Unavailable(f"go build in compat-tests/{folder} failed (run scripts/install-test-deps): "
                              f"{done.stderr.strip()[-1500:]}")
        tmp.replace(binary)
        for stale in binary.parent.glob(f"{folder}-*"):  # older builds of this driver
            if stale != binary and not stale.name.count(".tmp"):
                stale.unlink(missing_ok=True)
    return Driver(name=folder, argv=[str(binary)], cwd=src)


def node_driver(folder: str, script: str) -> Driver:
    """The node script compat-tests/<folder>/<script>, with that folder's node_modules."""
    node = shutil.which("node")
    if node is None:
        raise Unavailable("no node on PATH (the JavaScript client tests need Node 18+)")
    src = COMPAT / folder
    if not (src / "node_modules").is_dir():
        raise Unavailable(f"compat-tests/{folder}/node_modules missing: run scripts/install-test-deps "
                          f"(npm ci in compat-tests/{folder})")
    return Driver(name=folder, argv=[node, str(src / script)], cwd=src)


@dataclass
class BoundDriver:
    """A driver pointed at one broker: ``.ok(command, **flags)``, ``.run(command, **flags)``."""

    driver: Driver
    bootstrap: str

    def ok(self, command: str, timeout: float = 120.0, **options: object) -> list[dict]:
        return self.driver.ok(self.bootstrap, command, timeout=timeout, **options)

    def run(self, command: str, timeout: float = 120.0, **options: object) -> subprocess.CompletedProcess[str]:
        return self.driver.run(self.bootstrap, command, timeout=timeout, **options)


# --- what the tests check with, independent of the client under test ----------------------------

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


LogDirs = Path | Sequence[Path]


def partition_dir(log_dirs: LogDirs, topic: str, partition: int) -> Path:
    """The partition's directory: in the one log dir given, or (a cluster's brokers' log dirs) in
    the first that holds a replica of it (replicas hold the same batches)."""
    dirs = [Path(log_dirs)] if isinstance(log_dirs, Path | str) else [Path(d) for d in log_dirs]
    found = [d / f"{topic}-{partition}" for d in dirs if (d / f"{topic}-{partition}").is_dir()]
    return found[0] if found else dirs[0] / f"{topic}-{partition}"


def batch_headers(log_dirs: LogDirs, topic: str, partition: int = 0) -> list[dict[str, int]]:
    """The header of every data batch (control batches skipped) in the partition's first segment on
    disk: base_offset, attributes, codec id, producer_id, producer_epoch, base_sequence, records."""
    data = (partition_dir(log_dirs, topic, partition) / "00000000000000000000.log").read_bytes()
    out: list[dict[str, int]] = []
    pos = 0
    while pos + 61 <= len(data):
        length = int.from_bytes(data[pos + 8:pos + 12], "big", signed=True)
        if length <= 0:
            break

        def field(at: int, size: int, base: int = pos) -> int:
            return int.from_bytes(data[base + at:base + at + size], "big", signed=True)

        attributes = field(21, 2)
        if not attributes & 0x20:  # control batches (transaction markers)
            out.append({"base_offset": field(0, 8), "attributes": attributes, "codec": attributes & 7,
                        "producer_id": field(43, 8), "producer_epoch": field(51, 2),
                        "base_sequence": field(53, 4), "records": field(57, 4)})
        pos += 12 + length
    return out


def batch_codecs(log_dir: LogDirs, topic: str, partition: int = 0) -> list[str]:
    """The compression codec of every record batch in the partition's first segment on disk."""
    names = {v: k for k, v in CODEC_IDS.items()}
    return [names.get(b["codec"], f"codec-{b['codec']}") for b in batch_headers(log_dir, topic, partition)]


def check_idempotent_batches(log_dir: LogDirs, topic: str, partitions: int) -> int:
    """Every batch on disk carries one producer id and epoch, and each partition's sequences run
    from 0 without a gap (what an idempotent producer writes); returns that producer id."""
    ids = set()
    for p in range(partitions):
        sequence = 0
        for b in batch_headers(log_dir, topic, p):
            ids.add((b["producer_id"], b["producer_epoch"]))
            assert b["base_sequence"] == sequence, (p, b)
            sequence += b["records"]
    assert len(ids) == 1, ids
    ((producer_id, epoch),) = ids
    assert producer_id >= 0 and epoch >= 0
    return producer_id


def librdkafka_read(bootstrap: str, topic: str, count: int, timeout: float = 20.0,
                    isolation: str = "read_uncommitted") -> list[tuple[int, int, bytes | None, bytes]]:
    """Read ``count`` records of every partition from the start with confluent-kafka (librdkafka):
    (partition, offset, key, value), in the order received."""
    import time

    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{os.getpid()}-{time.monotonic_ns()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": isolation})
    out: list[tuple[int, int, bytes | None, bytes]] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            out.append((m.partition(), m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition (-1001 when none), read with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got}


def check_group_run(lines: list[dict], topic: str, partitions: int, count: int) -> None:
    """Judge the ``group`` command's lines (every driver prints the same shape):

    phase 0: m0 alone owns every partition; phase 1: m1 and m2 joined, the three split the partitions,
    ``count`` records are consumed once each, by their partition's owner; phase 2: m0 left, m1 and m2
    split the partitions, ``count`` more records consumed once each, m0's partitions resumed from
    where m0 committed (no record of phase 1 again).
    """
    from collections import Counter

    def assignment(phase: int) -> dict[str, list[int]]:
        (line,) = [x for x in lines if x.get("phase") == phase and "assignment" in x]
        return {m: sorted(ps) for m, ps in line["assignment"].items()}

    expected_members = {0: {"m0"}, 1: {"m0", "m1", "m2"}, 2: {"m1", "m2"}}
    for phase, members in expected_members.items():
        a = assignment(phase)
        assert set(a) == members, a
        assert sorted(p for ps in a.values() for p in ps) == list(range(partitions)), f"phase {phase}: {a}"
        assert all(a.values()), f"phase {phase}: a member owns nothing: {a}"
    assert {"phase": 2, "left": "m0"} in lines
    records = [x for x in lines if "value" in x]
    values = Counter(x["value"] for x in records)
    want = Counter(f"p{ph}-{i}-{topic}" for ph in (1, 2) for i in range(count))
    assert values == want, f"missing: {want - values}, extra or twice: {values - want}"
    for phase in (1, 2):
        owner = {p: m for m, ps in assignment(phase).items() for p in ps}
        for x in records:
            if x["value"].startswith(f"p{phase}-"):
                assert owner[x["partition"]] == x["member"], (phase, x, owner)
    offsets: dict[int, list[int]] = {}
    for x in records:
        offsets.setdefault(x["partition"], []).append(x["offset"])
    per_partition = 2 * count // partitions
    assert {p: sorted(o) for p, o in offsets.items()} == {p: list(range(per_partition)) for p in range(partitions)}
    assert not [x for x in lines if "commit_error" in x]


def check_static_run(lines: list[dict]) -> None:
    """Judge the ``static`` command's lines: the restarted static member got its old partitions back
    and the other member saw no new assignment."""
    (before,) = [x for x in lines if x.get("phase") == "before"]
    (after,) = [x for x in lines if x.get("phase") == "after"]
    assert {m: sorted(p) for m, p in after["assignment"].items()} == \
        {m: sorted(p) for m, p in before["assignment"].items()}
    assert after["events"]["b"] == before["events"]["b"], (before, after)
    assert after["events"]["a"] == 1, after


def main(argv: list[str]) -> int:
    if argv != ["build"]:
        print("usage: python -m tools.client_drivers build", file=sys.stderr)
        return 2
    for folder in GO_CLIENTS:
        try:
            print(f"{folder}: {go_driver(folder).argv[0]}")
        except Unavailable as exc:
            print(f"{folder}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def check_consume_transform_produce(lines: list[dict], bootstrap: str, produce: Callable[..., int], source: str,
                                    out: str, group: str, count: int) -> None:
    """Judge the ``ctp`` command: of two transactions, each producing the transformed half of the
    ``count`` input records with the input offsets sent to the transaction, the first was committed
    and the second aborted. So the group's committed offset is the half, and read_committed sees the
    first half's outputs (then a plain record written after them), none of the aborted ones."""
    half = count // 2
    steps = {x["step"]: x for x in lines if "step" in x}
    assert steps["commit"]["input_next"] == half and steps["abort"]["input_next"] == count, steps
    assert committed_offsets(bootstrap, group, source, 1) == {0: half}
    produce(out, [(None, b"after")])  # non-transactional: read_committed reaches it past the abort marker
    committed = [v for *_x, v in librdkafka_read(bootstrap, out, half + 1, isolation="read_committed")]
    assert committed == [f"out-v{i}".encode() for i in range(half)] + [b"after"]
    everything = [v for *_x, v in librdkafka_read(bootstrap, out, count + 1)]
    assert everything == [f"out-v{i}".encode() for i in range(count)] + [b"after"]
