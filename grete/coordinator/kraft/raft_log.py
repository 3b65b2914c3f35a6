"""What the Raft core needs of the metadata log, and an in-memory log that has it.

The core reads and changes the log only through ``RaftLog``, so it runs against ``InMemoryRaftLog``
in tests and simulations; the segment log of ``__cluster_metadata-0`` is adapted to the same
protocol when the core is wired to it. Every record carries the epoch of the leader that appended
it (the batch's partition leader epoch), and epochs never decrease along the log.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# The epoch reported for "no epoch at or below the one asked about": Raft's epochs start at 1.
NO_EPOCH = 0
LEADER_CHANGE = 2  # ControlRecordType of a LeaderChangeMessage
DATA = -1  # InMemoryRaftLog's mark of a record that is not a control record


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """An end offset (exclusive) and an epoch, ordered as Kafka orders them: epoch first."""

    epoch: int
    offset: int


# The format step's snapshot of a dynamic quorum's first voter set: never replicated (Kafka's
# BOOTSTRAP_SNAPSHOT_ID); the first leader copies its voter set into the log instead.
BOOTSTRAP_SNAPSHOT = OffsetAndEpoch(0, 0)


@dataclass(frozen=True, slots=True)
class RaftBatch:
    """Records appended together by one leader in one epoch; ``control`` batches hold the quorum's
    own control records (LeaderChangeMessage). ``raw`` is the batch as a leader wrote it (Kafka's
    v2 format), when it came from a log or a fetch: a follower stores and serves those bytes as they
    are, so every replica's log is the leader's byte for byte, whichever implementation wrote it."""

    base_offset: int
    epoch: int
    records: tuple[bytes, ...]
    control: bool = False
    raw: bytes | None = field(default=None, compare=False, repr=False)
    # The control record type of each record of a control batch (Kafka's ControlRecordType);
    # empty: every one a LeaderChangeMessage.
    control_types: tuple[int, ...] = ()

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    def typed_controls(self) -> list[tuple[int, int, bytes]]:
        """(offset, control type, value) of each record of a control batch."""
        if not self.control:
            return []
        types = self.control_types or (LEADER_CHANGE,) * len(self.records)
        return [(self.base_offset + i, t, v) for i, (t, v) in enumerate(zip(types, self.records, strict=True))]


class RaftLog(Protocol):
    """The metadata log as the Raft core sees it."""

    @property
    def start_offset(self) -> int:
        """The first offset still in the log (greater than 0 once a snapshot replaced a prefix)."""
        ...

    @property
    def end_offset(self) -> int:
        """The offset the next record gets."""
        ...

    @property
    def last_epoch(self) -> int:
        """The epoch of the last record, NO_EPOCH for an empty log."""
        ...

    def epoch_end_offset(self, epoch: int) -> OffsetAndEpoch:
        """The largest epoch at or below ``epoch`` held by the log and the offset after its last
        record (OffsetForLeaderEpoch's answer); (NO_EPOCH, start_offset) when there is none."""
        ...

    def append(self, batch: RaftBatch) -> None:
        """Append ``batch``; its base offset is the log's end offset."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Drop every record at ``offset`` and after."""
        ...

    def read(self, offset: int, max_records: int) -> list[RaftBatch]:
        """Batches holding the records from ``offset`` (at most ``max_records`` of them)."""
        ...

    def control_batches(self) -> Iterator[RaftBatch]:
        """The log's control batches in order (the voter sets a replica reads at start)."""
        ...

    # --- snapshots (Kafka's ReplicatedLog): the state at an offset, which replaces the log before it
    def latest_snapshot(self) -> OffsetAndEpoch | None:
        """The newest frozen snapshot's id (its end offset and the epoch of its last record),
        the bootstrap snapshot (0, 0) included."""
        ...

    def earliest_snapshot(self) -> OffsetAndEpoch | None:
        ...

    def snapshot_size(self, snapshot: OffsetAndEpoch) -> int | None:
        """The frozen snapshot's size in bytes; None when there is no such snapshot."""
        ...

    def read_snapshot(self, snapshot: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` of a frozen snapshot from ``position`` (FetchSnapshot's slice)."""
        ...

    def write_snapshot_chunk(self, snapshot: OffsetAndEpoch, position: int, data: bytes) -> int:
        """Add ``data`` at ``position`` to a snapshot being fetched (started at position 0); its size now."""
        ...

    def freeze_snapshot(self, snapshot: OffsetAndEpoch) -> None:
        """The fetched snapshot is whole: make it durable and one of the log's snapshots."""
        ...

    def truncate_to_latest_snapshot(self) -> bool:
        """Replace the whole log by the latest snapshot when it is ahead of the log (Kafka's
        truncateToLatestSnapshot after a FetchSnapshot); whether it did."""
        ...


class InMemoryRaftLog:
    """A RaftLog in lists, one entry per record (batches are cut back out by epoch on read)."""

    def __init__(self, start_offset: int = 0) -> None:
        self._start = start_offset
        self._epochs: list[int] = []
        self._values: list[bytes] = []
        self._controls: list[int] = []  # each record's control type; DATA for a metadata record
        self.snapshots: dict[OffsetAndEpoch, bytes] = {}  # frozen, by id
        self._partial: dict[OffsetAndEpoch, bytearray] = {}

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._start + len(self._epochs)

    @property
    def last_epoch(self) -> int:
        if self._epochs:
            return self._epochs[-1]
        return empty_log_epoch(self)

    def epoch_end_offset(self, epoch: int) -> OffsetAndEpoch:
        count = bisect_right(self._epochs, epoch)
        if count == 0:
            return before_log(self)
        return OffsetAndEpoch(self._epochs[count - 1], self._start + count)

    def append(self, batch: RaftBatch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(f"batch at {batch.base_offset} appended at the log end {self.end_offset}")
        if batch.epoch < self.last_epoch:
            raise ValueError(f"batch of epoch {batch.epoch} after epoch {self.last_epoch}")
        self._epochs.extend([batch.epoch] * len(batch.records))
        self._values.extend(batch.records)
        self._controls.extend([t for _offset, t, _value in batch.typed_controls()] if batch.control
                              else [DATA] * len(batch.records))

    def truncate_to(self, offset: int) -> None:
        keep = max(offset - self._start, 0)
        del self._epochs[keep:], self._values[keep:], self._controls[keep:]

    def read(self, offset: int, max_records: int) -> list[RaftBatch]:
        first = offset - self._start
        last = min(first + max_records, len(self._epochs))
        batches: list[RaftBatch] = []
        while first < last:
            end = first + 1
            control = self._controls[first] != DATA
            while (end < last and self._epochs[end] == self._epochs[first]
                   and (self._controls[end] != DATA) == control):
                end += 1
            types = tuple(self._controls[first:end]) if control else ()
            batches.append(RaftBatch(self._start + first, self._epochs[first], tuple(self._values[first:end]), control,
                                     control_types=() if set(types) <= {LEADER_CHANGE} else types))
            first = end
        return batches

    def control_batches(self) -> Iterator[RaftBatch]:
        offset = self._start
        while batches := self.read(offset, 1000):
            yield from (batch for batch in batches if batch.control)
            offset = batches[-1].next_offset

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return max(self.snapshots, key=lambda s: (s.offset, s.epoch), default=None)

    def earliest_snapshot(self) -> OffsetAndEpoch | None:
        return min(self.snapshots, key=lambda s: (s.offset, s.epoch), default=None)

    def snapshot_size(self, snapshot: OffsetAndEpoch) -> int | None:
        data = self.snapshots.get(snapshot)
        return None if data is None else len(data)

    def read_snapshot(self, snapshot: OffsetAndEpoch, position: int, max_bytes: int) -> bytes:
        return self.snapshots[snapshot][position:position + max_bytes]

    def write_snapshot_chunk(self, snapshot: OffsetAndEpoch, position: int, data: bytes) -> int:
        partial = self._partial.setdefault(snapshot, bytearray())
        del partial[position:]
        partial += data
        return len(partial)

    def freeze_snapshot(self, snapshot: OffsetAndEpoch) -> None:
        self.snapshots[snapshot] = bytes(self._partial.pop(snapshot))

    def truncate_to_latest_snapshot(self) -> bool:
        latest = self.latest_snapshot()
        if latest is None or not snapshot_ahead(self, latest):
            return False
        self._start = latest.offset
        del self._epochs[:], self._values[:], self._controls[:]
        self.snapshots = {s: d for s, d in self.snapshots.items() if s.offset >= latest.offset}
        return True

    def entry(self, offset: int) -> tuple[int, bytes]:
        """(epoch, value) of the record at ``offset``."""
        index = offset - self._start
        return self._epochs[index], self._values[index]

    def entries(self) -> Sequence[tuple[int, bytes]]:
        return list(zip(self._epochs, self._values, strict=True))


def empty_log_epoch(log: RaftLog) -> int:
    """The last epoch of a log with no records: its latest snapshot's when the log starts where that
    snapshot ends (after a FetchSnapshot, or once segments before a snapshot are deleted), as Kafka's
    lastFetchedEpoch."""
    latest = log.latest_snapshot()
    if latest is not None and latest.offset == log.start_offset == log.end_offset:
        return latest.epoch
    return NO_EPOCH


def before_log(log: RaftLog) -> OffsetAndEpoch:
    """epoch_end_offset's answer for an epoch older than every record of the log: the earliest
    snapshot's id when the log starts at it (Kafka's endOffsetForEpoch), else (NO_EPOCH, start)."""
    earliest = log.earliest_snapshot()
    if earliest is not None and earliest.offset == log.start_offset and log.start_offset > 0:
        return earliest
    return OffsetAndEpoch(NO_EPOCH, log.start_offset)


def snapshot_ahead(log: RaftLog, snapshot: OffsetAndEpoch) -> bool:
    """Whether ``snapshot`` is past the log (Kafka's truncateToLatestSnapshot condition)."""
    last = log.last_epoch
    return snapshot.epoch > last or (snapshot.epoch == last and snapshot.offset > log.end_offset)


def truncation_offset(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Where a follower cuts its log when the leader answers a fetch with ``diverging`` (the end of
    the leader's largest epoch at or below the follower's last fetched epoch): at the end of that
    epoch in both logs, or at the end of the follower's own largest epoch below it."""
    if diverging.epoch == NO_EPOCH:
        return min(diverging.offset, log.end_offset)
    local = log.epoch_end_offset(diverging.epoch)
    if local.epoch == diverging.epoch:
        return min(local.offset, diverging.offset)
    return local.offset
