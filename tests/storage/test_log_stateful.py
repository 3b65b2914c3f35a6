"""A Hypothesis state machine: the log on disk against a list of records in memory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.records.record import absolute_records
from grete.storage import Log, LogConfig

from ._batches import append, fetched_batches

CFG = LogConfig(segment_bytes=700, index_interval_bytes=150, file_delete_delay_ms=0)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="grete-stateful-"))
        self.log = Log.open(self.tmp / "m-0", CFG, clean_shutdown=True)
        self.model: list[bytes] = []  # value of offset i
        self.batch_last: list[int] = []  # last offset of the batch holding offset i
        self.start = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(values=st.lists(st.binary(min_size=0, max_size=120), min_size=1, max_size=5))
    def append(self, values: list[bytes]) -> None:
        res = append(self.log, list(values))
        assert res.base_offset == len(self.model)
        assert res.last_offset == len(self.model) + len(values) - 1
        self.model.extend(values)
        self.batch_last.extend([res.last_offset] * len(values))

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @precondition(lambda self: len(self.model) > self.start)
    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, len(self.model)))
        assert self.log.delete_records_before(offset) == offset
        self.start = offset

    @precondition(lambda self: len(self.model) > self.start)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start, len(self.model) - 1))
        if offset == self.start:
            # Nothing readable stays: the log restarts empty at ``offset`` (offsets below the
            # log start are never handed out again).
            self.log.truncate_to(offset)
            del self.model[offset:]
            del self.batch_last[offset:]
            # A batch that held the start is gone with it: a later truncation, inside batches
            # appended from here, must not walk back into it.
            self.batch_last[:offset] = [min(last, offset - 1) for last in self.batch_last[:offset]]
            return
        # A batch is never split: the log ends where the batch holding ``offset`` starts.
        first = offset
        while first > 0 and self.batch_last[first - 1] >= offset:
            first -= 1
        self.log.truncate_to(offset)
        del self.model[first:]
        del self.batch_last[first:]
        self.start = min(self.start, first)  # the start never passes the end

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        if clean:
            self.log.close()
        else:
            self.log.flush()  # a crash after a flush: everything must come back
        start = self.log.log_start_offset
        self.log = Log.open(self.tmp / "m-0", CFG, clean_shutdown=clean, recovery_point=0,
                            log_start_offset=start)

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.start - 2, len(self.model) + 2))
        max_bytes = data.draw(st.integers(1, 3000))
        bound = data.draw(st.one_of(st.none(), st.integers(self.start, len(self.model))))
        if not self.start <= offset <= len(self.model):
            with pytest.raises(KafkaError) as exc:
                self.log.read(offset, max_bytes, upper_bound=bound)
            assert exc.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
            return
        res = self.log.read(offset, max_bytes, upper_bound=bound)
        limit = len(self.model) if bound is None else bound
        batches = fetched_batches(res.read_bytes())
        if offset >= limit or self.batch_last[offset] >= limit:
            assert batches == []  # a bound inside the first batch serves nothing, as in Kafka
            return
        assert batches, "min_one must return a batch"
        assert batches[0].base_offset <= offset <= batches[0].last_offset
        assert res.size <= max_bytes or len(batches) == 1
        assert batches[-1].last_offset < limit
        for b in batches:
            for r in absolute_records(b):
                assert r.value == self.model[r.offset]

    @invariant()
    def offsets_match(self) -> None:
        assert self.log.log_end_offset == len(self.model)
        assert self.log.log_start_offset == self.start


LogMachine.TestCase.settings = settings(max_examples=15, stateful_step_count=25, deadline=None)
TestLogStateful = LogMachine.TestCase
