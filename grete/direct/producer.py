"""``grete.direct.Producer``: confluent-kafka's Producer, writing batches straight into the broker's
produce regions (docs/direct.md).

``produce()`` buffers a record for its partition; a partition's buffer becomes one v2 batch when it
reaches ``batch.size`` or at the next ``poll()`` / ``flush()``. Sending a batch: reserve space
(shared mode: one fetch-and-add on the region's ordering word; exclusive: the producer's own
position), write the bytes into the region, announce them (the notification is the immediate of a
WriteWithImm). The broker's answer arrives on the session socket; ``poll()`` turns answers into
``on_delivery(err, msg)`` calls. A batch answered PRODUCER_FENCED (region sealed, grant revoked)
was not appended: it is sent again through a fresh grant.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grete.direct import encoder
from grete.direct.control import Control
from grete.direct.layout import (
    ACK,
    FLAG_SKIP,
    NOTIFY,
    ORDER_MASK,
    ORDER_WORD,
    SEALED_WORD,
    reservation_delta,
    split_word,
)
from grete.direct.transport import Channel, Region, transport, write_with_imm
from grete.direct.types import KafkaError, KafkaException, Message
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import DirectProduceAddressRequest, DirectProduceAddressResponse
from grete.protocol.records.batch import BATCH_OVERHEAD

DeliveryCallback = Callable[[KafkaError | None, Message], None]
MAX_RESENDS = 5


@dataclass(slots=True)
class Pending:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int
    on_delivery: DeliveryCallback


@dataclass(slots=True)
class Grant:
    region_id: int
    key: int
    shm: Region
    data_offset: int
    data_length: int
    exclusive: bool
    next_offset: int = 0  # exclusive: where the next batch goes
    next_order: int = 0


@dataclass(slots=True)
class InFlight:
    topic: str
    partition: int
    batch: bytearray
    records: list[Pending | None]  # None: a record without a delivery callback
    resends: int = 0


@dataclass(slots=True)
class _Buffer:
    """A partition's records so far, already encoded into a batch whose header is still to come."""

    base_timestamp: int
    records: list[Pending | None] = field(default_factory=list)
    batch: bytearray = field(default_factory=lambda: bytearray(BATCH_OVERHEAD))
    max_timestamp: int = -1


def murmur2(data: bytes) -> int:
    """Kafka's default partitioner hash (Java's Utils.murmur2), so keys land where Java clients put them."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


class Producer:
    def __init__(self, conf: dict[str, Any]) -> None:
        conf = dict(conf)
        self._transport = transport(str(conf.pop("direct.transport", "shm")))
        mode = str(conf.pop("direct.producer.mode", "shared"))
        if mode not in ("shared", "exclusive"):
            raise ValueError(f"direct.producer.mode={mode!r}: shared or exclusive")
        self._exclusive = mode == "exclusive"
        self._batch_size = int(conf.pop("batch.size", 16384))
        self._batch_limit = self._batch_size + BATCH_OVERHEAD  # batch.size counts the records' bytes
        self._encoder = encoder.select()
        self._append = self._encoder.append
        self._max_queued = int(conf.pop("queue.buffering.max.messages", 100000))
        self._queued = 0  # records buffered or in flight
        self._control = Control(str(conf.pop("bootstrap.servers")), str(conf.pop("client.id", "grete-direct")))
        hello = self._control.call(DirectProduceAddressRequest(transport=self._transport.name, session_id=-1,
                                                               topics=[]), DirectProduceAddressResponse, 0)
        self._channel: Channel = self._transport.connect(hello.endpoint)
        self._grants: dict[tuple[str, int], Grant] = {}
        self._partitions: dict[str, list[int]] = {}
        self._buffers: dict[tuple[str, int], _Buffer] = {}
        self._inflight: dict[tuple[int, int], InFlight] = {}
        self._round_robin = itertools.count()

    # --- confluent-kafka's API ---------------------------------------------------------------------
    def produce(self, topic: str, value: bytes | str | None = None, key: bytes | str | None = None,
                partition: int = -1, on_delivery: DeliveryCallback | None = None, timestamp: int = 0,
                headers: list[tuple[str, bytes | None]] | dict[str, bytes | None] | None = None,
                callback: DeliveryCallback | None = None) -> None:
        if self._queued >= self._max_queued:
            raise BufferError("Local: Queue full")  # as confluent-kafka: poll() and try again
        value_b = value.encode() if isinstance(value, str) else value
        key_b = key.encode() if isinstance(key, str) else key
        if partition < 0:
            partition = self._partition_for(topic, key_b)
        header_list = (list(headers.items()) if isinstance(headers, dict) else list(headers)) if headers else []
        ts = timestamp if timestamp > 0 else int(time.time() * 1000)
        buf = self._buffers.get((topic, partition))
        if buf is None:
            buf = self._buffers[(topic, partition)] = _Buffer(ts)
        # The record, encoded now (in C unless no compiler was found): one call, no per-field Python.
        size = self._append(buf.batch, ts - buf.base_timestamp, len(buf.records), key_b, value_b,
                                    header_list or None)
        report = on_delivery or callback
        # Without a callback there is nothing to report but the count: no per-record object.
        buf.records.append(None if report is None else Pending(key_b, value_b, header_list, ts, report))
        self._queued += 1
        if ts > buf.max_timestamp:
            buf.max_timestamp = ts
        if size >= self._batch_limit:
            self._send_buffer(topic, partition)

    def poll(self, timeout: float | None = None) -> int:
        """Send what is buffered, then serve delivery callbacks; the number of callbacks served."""
        self._send_all()
        return self._serve(0.0 if timeout is None else timeout)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything and wait for every answer; the number of batches still unanswered."""
        self._send_all()
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._inflight:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            self._serve(0.1 if left is None else min(left, 0.1))
        return len(self._inflight)

    def __len__(self) -> int:
        """Records buffered or awaiting their answer (confluent-kafka counts messages too)."""
        return self._queued

    def close(self) -> None:
        self._channel.close()
        self._control.close()
        for grant in self._grants.values():
            grant.shm.close()

    # --- internals ---------------------------------------------------------------------------------
    def _partition_for(self, topic: str, key: bytes | None) -> int:
        parts = self._partitions.get(topic)
        if parts is None:
            parts = self._partitions[topic] = self._control.partitions(topic)
        if key is None:
            return parts[next(self._round_robin) % len(parts)]
        return parts[(murmur2(key) & 0x7FFFFFFF) % len(parts)]

    def _send_all(self) -> None:
        for tp, buf in list(self._buffers.items()):
            if buf.records:
                self._send_buffer(*tp)

    def _send_buffer(self, topic: str, partition: int) -> None:
        buf = self._buffers.pop((topic, partition))
        batch = self._encoder.seal(buf.batch, len(buf.records), buf.base_timestamp, buf.max_timestamp)
        self._send(InFlight(topic, partition, batch, buf.records))

    def _send(self, flight: InFlight) -> None:
        """Reserve, write, announce (re-registering when the region is full or sealed)."""
        for _ in range(MAX_RESENDS):
            try:
                grant = self._grant(flight.topic, flight.partition)
            except KafkaException as exc:
                self._fail(flight, exc.error)
                return
            size = len(flight.batch)
            if size > grant.data_length:
                self._fail(flight, KafkaError(ErrorCode.MESSAGE_TOO_LARGE, "batch larger than a direct region"))
                return
            if grant.shm.load(SEALED_WORD):
                self._drop_grant(flight.topic, flight.partition)
                continue
            if grant.exclusive:
                order, offset = grant.next_order, grant.next_offset
                if offset + size > grant.data_length:
                    # Full: once the broker has taken everything written here (so nothing of this
                    # region is fenced and resent behind newer batches), it grants a new one.
                    self._drain(grant.region_id)
                    self._drop_grant(flight.topic, flight.partition)
                    continue
                grant.next_order = (order + 1) & ORDER_MASK
                grant.next_offset = offset + size
            else:
                order, offset = split_word(grant.shm.fetch_add(ORDER_WORD, reservation_delta(size)))
                if offset + size > grant.data_length:
                    # Overflow: the order is used up; say so, so the broker's chain goes on.
                    self._channel.notify(NOTIFY.pack(grant.key, grant.region_id, order, FLAG_SKIP, offset, size))
                    self._drain(grant.region_id)
                    self._drop_grant(flight.topic, flight.partition)
                    continue
            self._inflight[(grant.region_id, order)] = flight
            write_with_imm(self._channel, grant.shm, grant.data_offset + offset, flight.batch,
                           NOTIFY.pack(grant.key, grant.region_id, order, 0, offset, size))
            return
        self._fail(flight, KafkaError(ErrorCode.PRODUCER_FENCED, "no direct region could be had"))

    def _drain(self, region_id: int, timeout: float = 30.0) -> None:
        """Serve answers until none of this producer's batches in ``region_id`` is outstanding."""
        deadline = time.monotonic() + timeout
        while any(key[0] == region_id for key in self._inflight) and time.monotonic() < deadline:
            self._serve(0.05)

    def _grant(self, topic: str, partition: int) -> Grant:
        grant = self._grants.get((topic, partition))
        if grant is not None:
            return grant
        request = DirectProduceAddressRequest(
            transport=self._transport.name, session_id=self._channel.session_id,
            topics=[DirectProduceAddressRequest.DirectProduceTopic(name=topic, partitions=[
                DirectProduceAddressRequest.DirectProducePartition(index=partition, exclusive=self._exclusive)])])
        response = self._control.call(request, DirectProduceAddressResponse, 0)
        answer = response.topics[0].partitions[0]
        if answer.error_code:
            raise KafkaException(KafkaError(answer.error_code, answer.error_message))
        shm = self._transport.map_region(answer.region_address, answer.data_offset + answer.data_length,
                                         writable=True)
        grant = Grant(answer.region_id, answer.region_key, shm, answer.data_offset, answer.data_length,
                      answer.exclusive)
        self._grants[(topic, partition)] = grant
        return grant

    def _drop_grant(self, topic: str, partition: int) -> None:
        grant = self._grants.pop((topic, partition), None)
        if grant is not None:
            grant.shm.close()

    def _serve(self, timeout: float) -> int:
        served = 0
        for frame in self._channel.completions(timeout):
            region_id, order, code, base_offset, append_time = ACK.unpack(frame)
            flight = self._inflight.pop((region_id, order), None)
            if flight is None:
                continue
            if code == ErrorCode.PRODUCER_FENCED and flight.resends < MAX_RESENDS:
                # Not appended (sealed region, revoked grant): again, through a fresh grant.
                flight.resends += 1
                grant = self._grants.get((flight.topic, flight.partition))
                if grant is not None and grant.region_id == region_id:
                    self._drop_grant(flight.topic, flight.partition)
                self._send(flight)
                continue
            served += self._deliver(flight, None if code == 0 else KafkaError(code), base_offset, append_time)
        return served

    def _deliver(self, flight: InFlight, error: KafkaError | None, base_offset: int, append_time: int) -> int:
        self._queued -= len(flight.records)
        for i, pending in enumerate(flight.records):
            if pending is not None:
                offset = base_offset + i if error is None else -1
                ts = append_time if append_time >= 0 else pending.timestamp
                pending.on_delivery(error, Message(flight.topic, flight.partition, offset, pending.key,
                                                   pending.value, ts, pending.headers or None, error))
        return len(flight.records)

    def _fail(self, flight: InFlight, error: KafkaError) -> None:
        self._deliver(flight, error, -1, -1)
