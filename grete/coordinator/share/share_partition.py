"""One share partition (KIP-932): the in-flight records of one (share group, topic-partition).

Records from the share-partition start offset (SPSO, ``start``) up to ``end`` (the first offset
never acquired) are in flight; each is Available, Acquired (by one member, until its acquisition
lock expires), Acknowledged or Archived. State is kept as runs of consecutive offsets sharing
state, delivery count, owner and lock deadline, so the cost is per batch or acknowledgement range,
never per record. A run splits only where an acknowledgement or a record-limited acquisition cuts
it. Leading Acknowledged/Archived runs are dropped as the SPSO moves past them.

Pure state: time is passed in, the owner (grete.broker.groups.share_groups) schedules lock expiry.
State ids are Kafka's RecordState ids, as ShareSnapshot/ShareUpdate records store them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from grete.protocol.errors import ErrorCode

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
STATE_NAMES = {AVAILABLE: "Available", ACQUIRED: "Acquired", ACKNOWLEDGED: "Acknowledged", ARCHIVED: "Archived"}

# AcknowledgeType ids on the wire (ShareFetch/ShareAcknowledge AcknowledgeTypes).
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4


@dataclass(slots=True)
class Run:
    first: int
    last: int
    state: int
    delivery_count: int
    member: str | None = None
    deadline_ms: int = 0


@dataclass(frozen=True, slots=True)
class Acquired:
    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class BatchSpan:
    """Offsets of one log batch, as the log's headers give them."""
    first: int
    last: int
    archived: bool = False  # never delivered: a transaction marker, or (read_committed) aborted records


class SharePartition:
    def __init__(self, start_offset: int, delivery_count_limit: int, max_in_flight: int) -> None:
        self.start = start_offset
        self.end = start_offset
        self.runs: list[Run] = []
        self.delivery_count_limit = delivery_count_limit
        self.max_in_flight = max_in_flight
        self.state_epoch = 0

    # --- acquisition -----------------------------------------------------------------------------
    def acquire(self, member: str, new_batches: Iterable[BatchSpan], max_records: int, *, now_ms: int,
                lock_ms: int, record_limit: bool, batch_size: int = 1) -> list[Acquired]:
        """Acquire for ``member``: Available in-flight runs first (redeliveries), then records past
        ``end`` with what is left of ``max_records``, as Kafka's SharePartition.acquire does. Whole
        batches are taken (``max_records`` is a soft limit) unless ``record_limit`` (ShareAcquireMode
        record_limit), in which case exactly up to ``max_records`` records are taken."""
        deadline = now_ms + lock_ms
        out = self._redeliver(member, max_records, deadline, record_limit)
        budget = max_records - sum(a.last - a.first + 1 for a in out)
        if budget > 0:
            # record_limit answers its new records as one range, batch_optimized in ranges of whole
            # batches of at least BatchSize records each (Kafka 4.3.1's AcquiredRecords)
            out += self._acquire_new(member, new_batches, budget, deadline, record_limit,
                                     budget if record_limit else max(1, batch_size))
        self._advance_start()
        return out

    def _redeliver(self, member: str, budget: int, deadline: int, record_limit: bool) -> list[Acquired]:
        out: list[Acquired] = []
        i = 0
        while i < len(self.runs) and budget > 0:
            run = self.runs[i]
            if run.state == AVAILABLE:
                if record_limit and run.last - run.first + 1 > budget:
                    self._split_at(run.first + budget)
                    run = self.runs[i]
                run.state, run.member, run.deadline_ms = ACQUIRED, member, deadline
                run.delivery_count += 1
                out.append(Acquired(run.first, run.last, run.delivery_count))
                budget -= run.last - run.first + 1
            i += 1
        return out

    def _acquire_new(self, member: str, new_batches: Iterable[BatchSpan], budget: int, deadline: int,
                     record_limit: bool, group_size: int) -> list[Acquired]:
        """Records past ``end``, batch by batch; consecutive batches share one run (one acquired
        range, one in-flight batch) until it holds ``group_size`` records."""
        made: list[Run] = []
        for batch in new_batches:
            if budget <= 0 or self.end - self.start >= self.max_in_flight:
                break
            if batch.last < self.end:
                continue
            first = max(batch.first, self.end)
            if batch.archived:
                self._append(Run(first, batch.last, ARCHIVED, 0))
                continue
            last = batch.last
            if record_limit and last - first + 1 > budget:
                last = first + budget - 1
            tail = made[-1] if made else None
            if tail is not None and tail is self.runs[-1] and tail.last + 1 == first \
                    and tail.last - tail.first + 1 < group_size:
                tail.last, self.end = last, last + 1
            else:
                made.append(Run(first, last, ACQUIRED, 1, member, deadline))
                self._append(made[-1])
            budget -= last - first + 1
        return [Acquired(r.first, r.last, 1) for r in made]

    def _append(self, run: Run) -> None:
        if run.first > self.end:  # offsets missing from the log (compacted): nothing to deliver
            self.runs.append(Run(self.end, run.first - 1, ARCHIVED, 0))
        self.runs.append(run)
        self.end = run.last + 1

    # --- acknowledgement ---------------------------------------------------------------------------
    def acknowledge(self, member: str, first: int, last: int, types: list[int], *, now_ms: int,
                    lock_ms: int) -> ErrorCode:
        """Apply one AcknowledgementBatch; all or nothing, as Kafka validates before it changes state."""
        if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
            return ErrorCode.INVALID_REQUEST
        if any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for t in types):
            return ErrorCode.INVALID_REQUEST
        if first < self.start or last >= self.end:
            return ErrorCode.INVALID_RECORD_STATE
        self._split_at(first)
        self._split_at(last + 1)
        covered = [r for r in self.runs if r.first >= first and r.last <= last]
        if any(r.state != ACQUIRED or r.member != member for r in covered):
            return ErrorCode.INVALID_RECORD_STATE
        if len(types) == 1:
            for run in covered:
                self._apply(run, types[0], now_ms, lock_ms)
        else:
            for offset in range(first, last + 1):  # per-offset types: split where they differ
                if offset > first and types[offset - first] != types[offset - first - 1]:
                    self._split_at(offset)
            for run in [r for r in self.runs if r.first >= first and r.last <= last]:
                self._apply(run, types[run.first - first], now_ms, lock_ms)
        self._advance_start()
        return ErrorCode.NONE

    def _apply(self, run: Run, kind: int, now_ms: int, lock_ms: int) -> None:
        if kind == ACCEPT:
            run.state, run.member = ACKNOWLEDGED, None
        elif kind in (REJECT, GAP):
            run.state, run.member = ARCHIVED, None
        elif kind == RELEASE:
            self._release(run)
        else:  # RENEW: the lock starts again (KIP-1222)
            run.deadline_ms = now_ms + lock_ms

    def _release(self, run: Run) -> None:
        """Back to Available, or Archived once delivered ``group.share.delivery.count.limit`` times."""
        run.state = ARCHIVED if run.delivery_count >= self.delivery_count_limit else AVAILABLE
        run.member = None

    def release_member(self, member: str) -> bool:
        """Every record ``member`` holds goes back (the member left, or its share session closed)."""
        released = False
        for run in self.runs:
            if run.state == ACQUIRED and run.member == member:
                self._release(run)
                released = True
        self._advance_start()
        return released

    def expire_locks(self, now_ms: int) -> bool:
        """Acquisition locks that timed out release their records; True if any did."""
        expired = False
        for run in self.runs:
            if run.state == ACQUIRED and run.deadline_ms <= now_ms:
                self._release(run)
                expired = True
        self._advance_start()
        return expired

    def next_deadline(self) -> int | None:
        deadlines = [r.deadline_ms for r in self.runs if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    def has_available(self) -> bool:
        return any(r.state == AVAILABLE for r in self.runs)

    # --- offsets ---------------------------------------------------------------------------------
    def reset_start(self, offset: int) -> None:
        """AlterShareGroupOffsets, or the log start moving past the SPSO: forget everything before."""
        self.runs = [r for r in self.runs if r.last >= offset]
        if self.runs and self.runs[0].first < offset:
            self.runs[0].first = offset
        self.start = offset
        self.end = max(self.end, offset)

    def _advance_start(self) -> None:
        drop = 0
        for run in self.runs:
            if run.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            drop += 1
        if drop:
            self.start = self.runs[drop - 1].last + 1
            del self.runs[:drop]
        if not self.runs:
            self.start = self.end

    def _split_at(self, offset: int) -> None:
        """Make ``offset`` the first offset of a run (no-op outside the in-flight runs)."""
        for i, run in enumerate(self.runs):
            if run.first < offset <= run.last:
                tail = Run(offset, run.last, run.state, run.delivery_count, run.member, run.deadline_ms)
                run.last = offset - 1
                self.runs.insert(i + 1, tail)
                return

    def delivery_complete_count(self) -> int:
        """Records past the SPSO whose delivery is complete (Acknowledged or Archived): KIP-1226's
        count, which a share partition's lag leaves out."""
        return sum(r.last - r.first + 1 for r in self.runs if r.state in (ACKNOWLEDGED, ARCHIVED))

    def in_flight(self) -> list[Run]:
        return list(self.runs)

    # --- persistence (__share_group_state) ----------------------------------------------------------
    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """(first, last, state, delivery count) of every in-flight run; an acquired run is written as
        Available, as Kafka persists it (a lock does not survive a restart)."""
        return [(r.first, r.last, AVAILABLE if r.state == ACQUIRED else r.state, r.delivery_count)
                for r in self.runs]

    @classmethod
    def restore(cls, start_offset: int, batches: list[tuple[int, int, int, int]], delivery_count_limit: int,
                max_in_flight: int) -> SharePartition:
        sp = cls(start_offset, delivery_count_limit, max_in_flight)
        for first, last, state, count in sorted(batches):
            if last < sp.end:
                continue
            first = max(first, sp.end)
            if first > sp.end:  # never acquired before the restart
                sp.runs.append(Run(sp.end, first - 1, AVAILABLE, 0))
            sp.runs.append(Run(first, last, AVAILABLE if state == ACQUIRED else state, count))
            sp.end = last + 1
        sp._advance_start()
        return sp
