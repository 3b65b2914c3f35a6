"""Leader-epoch cache: which offset each leader epoch started at (for OffsetForLeaderEpoch)."""

from __future__ import annotations

from pathlib import Path

from grete.storage.files import LEADER_EPOCH_CHECKPOINT, read_checkpoint, write_checkpoint

UNDEFINED = (-1, -1)


class LeaderEpochCache:
    """File ``leader-epoch-checkpoint`` (text, Kafka's checkpoint form)::

        0            <- version
        2            <- number of entries
        0 0          <- "epoch startOffset", epochs and offsets increasing
        3 1500

    Rewritten atomically whenever the entries change (rare: once per leadership change).
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / LEADER_EPOCH_CHECKPOINT
        self.entries: list[tuple[int, int]] = []
        self.corrupt = False  # the log rebuilds the entries from batch headers when set
        # What the file holds (None: absent or unreadable), so that a flush of the same entries is no
        # rewrite: a restart re-assigns every partition's epoch, which mostly changes nothing.
        self._on_disk: list[tuple[int, int]] | None = None
        try:
            rows = read_checkpoint(self.path)
            self.entries = [(int(r[0]), int(r[1])) for r in rows or []]
            if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(self.entries, self.entries[1:], strict=False)):
                raise ValueError("epochs out of order")
            self._on_disk = None if rows is None else list(self.entries)
        except (ValueError, IndexError, UnicodeDecodeError):
            self.entries = []
            self.corrupt = True

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True) -> None:
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        # An entry whose start is at or past the new one can never be used again.
        self.entries = [e for e in self.entries if e[1] < start_offset]
        self.entries.append((epoch, start_offset))
        if persist:
            self.flush()

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose batches hold ``offset`` (Kafka's epochForOffset): the last entry starting at
        or before it; -1 if none does."""
        found = -1
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's rule: the latest epoch ends at the LEO; an older one at the start of the next
        higher epoch, reported under the largest known epoch <= the request; an epoch newer than
        all known ones is undefined (-1, -1)."""
        if epoch < 0 or not self.entries:
            return UNDEFINED
        if epoch == self.entries[-1][0]:
            return epoch, log_end_offset
        higher = next((e for e in self.entries if e[0] > epoch), None)
        if higher is None:
            return UNDEFINED
        floor = [e for e in self.entries if e[0] <= epoch]
        return (floor[-1][0] if floor else epoch), higher[1]

    def truncate_from_end(self, end_offset: int, *, persist: bool = True) -> None:
        kept = [e for e in self.entries if e[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            if persist:
                self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop epochs wholly before ``start_offset``; the one spanning it now starts there."""
        before = [e for e in self.entries if e[1] <= start_offset]
        after = [e for e in self.entries if e[1] > start_offset]
        kept = ([(before[-1][0], start_offset)] if before else []) + after
        if kept != self.entries:
            self.entries = kept
            self.flush()

    def clear(self) -> None:
        self.entries = []
        self.flush()

    def flush(self) -> None:
        if self.entries == self._on_disk:
            return
        write_checkpoint(self.path, (f"{e} {o}" for e, o in self.entries))
        self._on_disk = list(self.entries)
