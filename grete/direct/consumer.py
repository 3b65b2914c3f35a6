"""``grete.direct.Consumer``: confluent-kafka's Consumer, reading segment files directly.

``assign()`` asks the broker (DirectConsumeAddress, over the control connection) where each
partition's offset is: a segment file, a byte position, and a slot in this consumer's slot region.
``poll()`` then reads the slots of all assigned partitions in one operation (a consistent copy
under the broker's sequence lock), and for each partition with readable bytes reads them from the
file: up to the high watermark's position, or the last stable offset's for read_committed. Only
whole batches are returned; each batch's CRC is checked as Kafka's consumers do. No request reaches
the broker on this path until a file is sealed (rolled: ask for the next one) or gone (deleted by
retention: an error message, then ``auto.offset.reset``).

Waiting: ``poll(timeout)`` spins on the slots for ``direct.poll.spin.us`` (paper: consumers poll
their slot region) and then backs off in short sleeps; the broker is never involved.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grete.direct import atomics
from grete.direct.control import Control
from grete.direct.layout import DELETED, REVOKED, SEALED, SLOT, SLOT_BYTES
from grete.direct.transport import FileReader, Region, transport
from grete.direct.types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import DirectConsumeAddressRequest, DirectConsumeAddressResponse
from grete.protocol.records.batch import LOG_OVERHEAD, RecordBatch, iter_batches, peek_batch_size
from grete.protocol.records.control import ControlType, parse_control_key
from grete.protocol.records.record import decode_records

Request = DirectConsumeAddressRequest


@dataclass(slots=True)
class _Part:
    topic: str
    partition: int
    reader: FileReader
    base_offset: int
    position: int
    next_offset: int
    slot: int
    aborted: list[tuple[int, int]] = field(default_factory=list)  # (first offset, producer id), sorted
    aborted_known_below: int = 0
    aborting: set[int] = field(default_factory=set)


class Consumer:
    def __init__(self, conf: dict[str, Any]) -> None:
        conf = dict(conf)
        self._transport = transport(str(conf.pop("direct.transport", "shm")))
        isolation = str(conf.pop("isolation.level", "read_uncommitted"))
        if isolation not in ("read_uncommitted", "read_committed"):
            raise ValueError(f"isolation.level={isolation!r}")
        self._isolation = 1 if isolation == "read_committed" else 0
        reset = str(conf.pop("auto.offset.reset", "latest"))
        self._reset = OFFSET_BEGINNING if reset in ("earliest", "smallest", "beginning") else OFFSET_END
        self._fetch_bytes = int(conf.pop("direct.fetch.bytes", 1 << 20))
        self._spin_s = int(conf.pop("direct.poll.spin.us", 200)) / 1e6
        self._check_crcs = str(conf.pop("check.crcs", "true")).lower() == "true"
        self._control = Control(str(conf.pop("bootstrap.servers")), str(conf.pop("client.id", "grete-direct")))
        self._key = -1
        # A session on the notification endpoint: the broker frees this consumer's slots when it
        # ends (a consumer that dies without close() costs the broker nothing for long).
        hello = self._control.call(Request(transport=self._transport.name, session_id=-1, consumer_key=-1,
                                           isolation_level=0, topics=[]), DirectConsumeAddressResponse, 0)
        self._channel = self._transport.connect(hello.endpoint)
        self._slots: Region | None = None
        self._snapshot: Any = None
        self._snapshot_view: memoryview | None = None
        self._slot_count = 0
        self._parts: dict[tuple[str, int], _Part] = {}
        self._ready: collections.deque[Message] = collections.deque()
        # True while some partition may have more to read than the last pass took (or nothing has
        # been read yet); otherwise an unchanged slot region means there is nothing to do.
        self._behind = True
        self._changed: Callable[[], int] = lambda: 1

    # --- confluent-kafka's API ---------------------------------------------------------------------
    def assign(self, partitions: list[TopicPartition]) -> None:
        for part in list(self._parts.values()):
            part.reader.close()
        forgotten = [p.slot for p in self._parts.values()]
        self._parts.clear()
        self._ready.clear()
        self._register([(tp.topic, tp.partition, tp.offset if tp.offset in (OFFSET_BEGINNING, OFFSET_END)
                         or tp.offset >= 0 else self._reset) for tp in partitions], forgotten)

    def subscribe(self, topics: list[str], on_assign: Any = None, **_: Any) -> None:
        """All partitions of ``topics``, from ``auto.offset.reset``: a static assignment (no consumer
        group: the direct library does not join one, see docs/direct.md)."""
        assignment = [TopicPartition(t, p, self._reset) for t in topics for p in self._control.partitions(t)]
        self.assign(assignment)
        if on_assign is not None:
            on_assign(self, assignment)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition) for p in self._parts.values()]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        for tp in partitions:
            part = self._parts.get((tp.topic, tp.partition))
            tp.offset = part.next_offset if part is not None else -1001
        return partitions

    def poll(self, timeout: float | None = None) -> Message | None:
        ready = self._ready
        if ready:
            return ready.popleft()
        if self._behind or self._changed():
            self._fetch()
        if ready:
            return ready.popleft()
        if not timeout:
            return None
        start = time.monotonic()
        deadline = start + (1e9 if timeout < 0 else timeout)
        pause = 0.00005
        while True:
            now = time.monotonic()
            if now >= deadline:
                return None
            if now - start > self._spin_s:
                time.sleep(min(pause, deadline - now))
                pause = min(pause * 2, 0.002)
            if self._behind or self._changed():
                self._fetch()
            if ready:
                return ready.popleft()

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        out: list[Message] = []
        message = self.poll(timeout)
        while message is not None:
            out.append(message)
            if len(out) >= num_messages:
                break
            message = self.poll(0)
        return out

    def close(self) -> None:
        if self._parts and self._key >= 0:
            try:
                self._control.call(Request(transport=self._transport.name, session_id=self._channel.session_id,
                                           consumer_key=self._key, isolation_level=self._isolation, topics=[],
                                           forgotten=[p.slot for p in self._parts.values()]),
                                   DirectConsumeAddressResponse, 0)
            except (OSError, ConnectionError):
                pass
        for part in self._parts.values():
            part.reader.close()
        self._parts.clear()
        self._snapshot_view = None
        if self._slots is not None:
            self._slots.close()
        self._channel.close()
        self._control.close()

    # --- registration ------------------------------------------------------------------------------
    def _register(self, wanted: list[tuple[str, int, int]], forgotten: list[int] | None = None) -> None:
        by_topic: dict[str, list[Request.DirectConsumePartition]] = {}
        for topic, partition, offset in wanted:
            by_topic.setdefault(topic, []).append(Request.DirectConsumePartition(index=partition, offset=offset))
        request = Request(transport=self._transport.name, session_id=self._channel.session_id,
                          consumer_key=self._key, isolation_level=self._isolation,
                          topics=[Request.DirectConsumeTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
                          forgotten=forgotten or [])
        response = self._control.call(request, DirectConsumeAddressResponse, 0)
        if response.error_code:
            raise KafkaException(KafkaError(response.error_code, "DirectConsumeAddress refused"))
        if response.consumer_key >= 0 and (self._slots is None or response.consumer_key != self._key):
            self._key = response.consumer_key
            self._slots = self._transport.map_region(response.slots_address, response.slots_length, writable=False)
            self._snapshot = atomics.ffi().new("char[]", response.slots_length)
            self._snapshot_view = memoryview(atomics.ffi().buffer(self._snapshot))
        for topic in response.topics:
            for answer in topic.partitions:
                tp = (topic.name, answer.index)
                old = self._parts.pop(tp, None)
                if old is not None:
                    old.reader.close()
                if answer.error_code:
                    self._ready.append(Message(topic.name, answer.index, -1, None, None,
                                               error=KafkaError(answer.error_code, answer.error_message)))
                    continue
                part = _Part(topic.name, answer.index, self._transport.open_file(answer.segment_address),
                             answer.base_offset, answer.position, answer.offset, answer.slot)
                part.aborted = sorted((a.first_offset, a.producer_id) for a in answer.aborted_transactions)
                part.aborted_known_below = answer.last_stable_offset
                if old is not None:
                    part.aborting = old.aborting
                self._parts[tp] = part
        self._slot_count = 1 + max((p.slot for p in self._parts.values()), default=-1)
        self._behind = True
        if self._slots is not None and self._slot_count:
            self._changed = self._slots.changed_check(self._snapshot, self._slot_count, SLOT_BYTES)

    # --- reading -------------------------------------------------------------------------------------
    def _fetch(self) -> None:
        slots, view = self._slots, self._snapshot_view
        if slots is None or view is None or not self._slot_count:
            return
        if not slots.snapshot_into(self._snapshot, self._slot_count, SLOT_BYTES):
            self._behind = True
            return  # the broker kept writing: next time
        committed = self._isolation == 1
        self._behind = False
        for part in list(self._parts.values()):
            (_, base, written, hw_pos, lso_pos, _, _, log_start, flags) = SLOT.unpack_from(
                view, part.slot * SLOT_BYTES)
            if base != part.base_offset:
                continue
            if flags & DELETED and part.next_offset >= log_start:
                # The file left the log but our offset did not (the cleaner replaced it, or it went
                # after we had read all of it): continue in whichever file holds it now.
                self._register([(part.topic, part.partition, part.next_offset)])
                continue
            if flags & (DELETED | REVOKED):
                self._lost(part, flags)
                continue
            if part.position > written:
                # The file is shorter than what was read from it (truncated underneath, as a
                # follower's divergent tail is): ask again where the next offset is.
                self._register([(part.topic, part.partition, part.next_offset)])
                continue
            limit = lso_pos if committed else hw_pos
            if part.position < limit:
                self._read(part, limit)
                if part.position < limit:
                    self._behind = True  # more than one fetch's worth, or a torn tail
            elif flags & SEALED and part.position >= written:
                self._register([(part.topic, part.partition, part.next_offset)])

    def _read(self, part: _Part, limit: int) -> None:
        want = min(limit - part.position, self._fetch_bytes)
        data = part.reader.read(part.position, want)
        first = peek_batch_size(data, 0) if len(data) >= LOG_OVERHEAD else None
        if first is not None and first > len(data) and part.position + first <= limit:
            data = part.reader.read(part.position, first)  # one batch larger than the fetch size
        for batch in iter_batches(data):
            if self._check_crcs and not batch.crc_ok():
                self._ready.append(Message(part.topic, part.partition, batch.base_offset, None, None,
                                           error=KafkaError(ErrorCode.CORRUPT_MESSAGE,
                                                            f"CRC mismatch at byte {part.position}")))
                return
            part.position += batch.size
            if batch.last_offset < part.next_offset:
                continue
            if self._isolation == 1 and (batch.is_transactional or batch.is_control):
                if not self._committed(part, batch):
                    part.next_offset = batch.next_offset
                    continue
            if batch.is_control:
                part.next_offset = batch.next_offset
                continue
            for record in decode_records(batch):
                offset = batch.base_offset + record.offset_delta
                if offset >= part.next_offset:
                    self._ready.append(Message(part.topic, part.partition, offset, record.key, record.value,
                                               batch.base_timestamp + record.timestamp_delta,
                                               record.headers or None))
            part.next_offset = batch.next_offset

    def _committed(self, part: _Part, batch: RecordBatch) -> bool:
        """Kafka's aborted-transaction filter: False for batches of aborted transactions and markers."""
        if batch.base_offset >= part.aborted_known_below:
            # Past what the broker listed aborts for: ask again from here (one control request).
            response = self._control.call(Request(
                transport=self._transport.name, session_id=self._channel.session_id, consumer_key=self._key,
                isolation_level=1,
                topics=[Request.DirectConsumeTopic(name=part.topic, partitions=[
                    Request.DirectConsumePartition(index=part.partition, offset=batch.base_offset)])]),
                DirectConsumeAddressResponse, 0)
            answer = response.topics[0].partitions[0]
            if not answer.error_code:
                part.aborted = sorted(set(part.aborted) | {(a.first_offset, a.producer_id)
                                                           for a in answer.aborted_transactions})
                part.aborted_known_below = answer.last_stable_offset
        while part.aborted and part.aborted[0][0] <= batch.last_offset:
            part.aborting.add(part.aborted.pop(0)[1])
        if batch.is_control:
            record = decode_records(batch)[0]
            if parse_control_key(record.key) == ControlType.ABORT:
                part.aborting.discard(batch.producer_id)
            return False
        return batch.producer_id not in part.aborting

    def _lost(self, part: _Part, flags: int) -> None:
        why = ("its segment file was deleted (retention or DeleteRecords)" if flags & DELETED
               else "the broker no longer serves it here")
        code = ErrorCode.OFFSET_OUT_OF_RANGE if flags & DELETED else ErrorCode.NOT_LEADER_OR_FOLLOWER
        self._ready.append(Message(part.topic, part.partition, part.next_offset, None, None,
                                   error=KafkaError(code, f"{part.topic}-{part.partition} at offset "
                                                          f"{part.next_offset}: {why}")))
        offset = self._reset if flags & DELETED else part.next_offset
        try:
            self._register([(part.topic, part.partition, offset)])
        except KafkaException as exc:
            self._parts.pop((part.topic, part.partition), None)
            self._ready.append(Message(part.topic, part.partition, -1, None, None, error=exc.error))
