"""The checker: a round's history (what clients were told) against what the cluster holds after healing.

Pure functions over plain data, so that tests/jepsen/test_checker.py can feed it histories with known
anomalies. Values are strings:

* idempotent topic: ``"<writer>-<seq>"`` where ``<writer>`` names one producer instance (a writer
  that had to recreate its producer continues under a new name) and ``seq`` counts up from 0;
* transactional topic: ``"t<txn>-<intent>-<i>"`` with intent ``c`` (the writer meant to commit)
  or ``a`` (it meant to abort: such a value must never be visible to read_committed).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# A read of one partition: (offset, value) in offset order.
Read = list[tuple[int, str]]


@dataclass
class Write:
    """One idempotent produce: ``status`` is ``ok`` (acknowledged), ``fail`` (an error: the write
    may or may not have happened, e.g. a timeout) or ``unknown`` (never resolved)."""

    value: str
    writer: str
    seq: int
    partition: int
    status: str = "unknown"
    offset: int = -1
    acked_at: float = 0.0
    error: str = ""


@dataclass
class Txn:
    """One transaction: ``outcome`` is ``committed``/``aborted`` when the client said so for sure,
    else ``unknown``."""

    txn: int
    intent: str  # "c" or "a"
    values: list[tuple[int, str]]  # (partition, value)
    outcome: str = "unknown"
    error: str = ""


@dataclass
class RoundResult:
    round: int
    fault: str
    acked: int = 0
    failed: int = 0
    unknown: int = 0
    txns_committed: int = 0
    txns_aborted: int = 0
    txns_unknown: int = 0
    lost: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    reorders: list[str] = field(default_factory=list)
    two_values: list[str] = field(default_factory=list)
    aborted_reads: list[str] = field(default_factory=list)
    lost_committed: list[str] = field(default_factory=list)
    partial_txns: list[str] = field(default_factory=list)
    unavailable_s: float = 0.0
    error: str = ""  # the round could not be run or checked (not an anomaly, but not a pass either)
    notes: list[str] = field(default_factory=list)

    ANOMALIES = ("lost", "duplicates", "reorders", "two_values", "aborted_reads", "lost_committed",
                 "partial_txns")

    def anomalies(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in self.ANOMALIES if getattr(self, name)}

    def as_json(self, examples: int = 20) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if isinstance(value, list) and key in self.ANOMALIES:
                out[key] = len(value)
                out[f"{key}_examples"] = value[:examples]
            else:
                out[key] = value
        return out


def parse_write(value: str) -> tuple[str, int] | None:
    writer, sep, seq = value.rpartition("-")
    if not sep or not seq.isdigit():
        return None
    return writer, int(seq)


def parse_txn_value(value: str) -> tuple[int, str] | None:
    parts = value.split("-")
    if len(parts) != 3 or not parts[0].startswith("t") or parts[1] not in ("c", "a"):
        return None
    return int(parts[0][1:]), parts[1]


def duplicates(reads: Mapping[int, Read]) -> list[str]:
    where: dict[str, list[str]] = defaultdict(list)
    for partition, read in sorted(reads.items()):
        for offset, value in read:
            where[value].append(f"p{partition}@{offset}")
    return sorted(f"{v} x{len(at)} ({', '.join(at)})" for v, at in where.items() if len(at) > 1)


def reorders(reads: Mapping[int, Read]) -> list[str]:
    """Within a partition, each writer's values must appear in increasing sequence order (an
    idempotent producer keeps order with max.in.flight <= 5, retries included)."""
    found = []
    for partition, read in sorted(reads.items()):
        last: dict[str, tuple[int, int]] = {}
        for offset, value in read:
            parsed = parse_write(value)
            if parsed is None:
                continue
            writer, seq = parsed
            if writer in last and seq < last[writer][1]:  # (equal: a duplicate, counted apart)
                prev_offset, prev_seq = last[writer]
                found.append(f"p{partition}: {writer} seq {seq} at offset {offset} after seq {prev_seq} "
                             f"at offset {prev_offset}")
            if writer not in last or seq > last[writer][1]:
                last[writer] = (offset, seq)
    return found


def disagreements(label_a: str, a: Mapping[int, Read], label_b: str, b: Mapping[int, Read],
                  only_a_values: bool = False) -> list[str]:
    """Offsets at which two sources (two reads, two replicas, acks vs a read) hold different values."""
    found = []
    for partition in sorted(set(a) & set(b)):
        at_b = dict(b[partition])
        for offset, value in a[partition]:
            other = at_b.get(offset)
            if other is not None and other != value:
                found.append(f"p{partition} offset {offset}: {label_a} {value!r}, {label_b} {other!r}")
    return found


def unavailable(ack_times: Iterable[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] without any acknowledged write."""
    times = sorted(t for t in ack_times if start <= t <= end)
    edges = [start, *times, end]
    return max((b - a for a, b in zip(edges, edges[1:], strict=False)), default=end - start)


def check_writes(result: RoundResult, writes: Iterable[Write], reads: Mapping[int, Read]) -> None:
    """Acknowledged writes lost, duplicates, reorders, and acks whose offset now holds another value."""
    writes = list(writes)
    present = {v for read in reads.values() for _, v in read}
    by_status = Counter(w.status for w in writes)
    result.acked, result.failed, result.unknown = by_status["ok"], by_status["fail"], by_status["unknown"]
    no_offset = sum(1 for w in writes if w.status == "ok" and w.offset < 0)
    if no_offset:
        result.notes.append(f"{no_offset} acks without an offset")
    result.lost += [f"{w.value} (p{w.partition} acked at offset {w.offset})"
                    for w in writes if w.status == "ok" and w.value not in present]
    result.duplicates += duplicates(reads)
    result.reorders += reorders(reads)
    acked_offsets: dict[int, Read] = defaultdict(list)
    for w in writes:
        if w.status == "ok" and w.offset >= 0:
            acked_offsets[w.partition].append((w.offset, w.value))
    result.two_values += disagreements("acked", acked_offsets, "read", reads)


def check_txns(result: RoundResult, txns: Iterable[Txn], committed_reads: Mapping[int, Read],
               uncommitted_reads: Mapping[int, Read]) -> None:
    """Aborted reads, committed transactions lost or half visible, duplicates, and read_committed
    disagreeing with read_uncommitted about an offset."""
    txns = list(txns)
    by_id = {t.txn: t for t in txns}
    outcomes = Counter(t.outcome for t in txns)
    result.txns_committed, result.txns_aborted = outcomes["committed"], outcomes["aborted"]
    result.txns_unknown = outcomes["unknown"]
    visible = {v for read in committed_reads.values() for _, v in read}
    raw = {v: f"p{p}@{o}" for p, read in uncommitted_reads.items() for o, v in read}
    for partition, read in sorted(committed_reads.items()):
        for offset, value in read:
            parsed = parse_txn_value(value)
            if parsed is None:
                continue
            txn = by_id.get(parsed[0])
            if parsed[1] == "a" or (txn is not None and txn.outcome == "aborted"):
                result.aborted_reads.append(f"p{partition} offset {offset}: {value} "
                                            f"(outcome {txn.outcome if txn else '?'})")
    for txn in txns:
        seen = [v for _, v in txn.values if v in visible]
        if txn.outcome == "committed" and len(seen) < len(txn.values):
            result.lost_committed += [f"{v} (t{txn.txn} committed; read_uncommitted: {raw.get(v, 'absent')})"
                                      for _, v in txn.values if v not in visible]
        elif txn.outcome != "committed" and 0 < len(seen) < len(txn.values):
            result.partial_txns.append(f"t{txn.txn} ({txn.outcome}): {len(seen)} of {len(txn.values)} visible")
    result.duplicates += [f"read_committed {d}" for d in duplicates(committed_reads)]
    result.duplicates += [f"read_uncommitted {d}" for d in duplicates(uncommitted_reads)]
    result.two_values += disagreements("read_committed", committed_reads, "read_uncommitted", uncommitted_reads)


def check_replicas(result: RoundResult, topic: str, replicas: Mapping[int, Mapping[int, Read]],
                   high_watermarks: Mapping[int, int]) -> None:
    """Every replica's log, read from its files after healing, agrees with every other below the
    high watermark (where all of a full ISR must hold the same records)."""
    brokers = sorted(replicas)
    for i, a in enumerate(brokers):
        for b in brokers[i + 1:]:
            below_a = {p: [(o, v) for o, v in read if o < high_watermarks.get(p, 0)]
                       for p, read in replicas[a].items()}
            for line in disagreements(f"broker {a}", below_a, f"broker {b}", replicas[b]):
                result.two_values.append(f"{topic} {line}")
