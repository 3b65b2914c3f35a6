"""Produce and Fetch semantics on the wire, with Kafka's exact error codes."""

from __future__ import annotations

import time

import pytest

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.batch import RecordBatch, iter_batches
from grete.protocol.records.record import Record, build_batch, decode_records
from grete.testing._wire import Wire


def _produce(wire: Wire, topic: str, batch: bytes, *, version: int = 9, acks: int = -1,
             partition: int = 0) -> ProduceResponse.PartitionProduceResponse | None:
    req = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=batch)])])
    if acks == 0:
        wire.send(req, version)
        return None
    resp = wire.call(req, ProduceResponse, version)
    return resp.responses[0].partition_responses[0]


def _fetch(wire: Wire, topic: str, offset: int, *, version: int = 12, max_wait_ms: int = 0,
           min_bytes: int = 1, isolation: int = 0) -> FetchResponse.PartitionData:
    req = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
                       isolation_level=isolation, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                           FetchRequest.FetchPartition(partition=0, fetch_offset=offset,
                                                       partition_max_bytes=1 << 20)])])
    return wire.call(req, FetchResponse, version).responses[0].partitions[0]


def _batch(values: list[bytes], keys: list[bytes | None] | None = None, **kw) -> bytearray:
    keys = keys or [None] * len(values)
    return build_batch([Record(i, i, k, v) for i, (k, v) in enumerate(zip(keys, values, strict=True))], **kw)


@pytest.fixture
def wire(grete_broker):
    w = Wire(grete_broker.host, grete_broker.port)
    yield w
    w.close()


def test_offsets_are_assigned_and_fetch_returns_whole_batches(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    first = _produce(wire, topic_name, _batch([b"a", b"b", b"c"]))
    second = _produce(wire, topic_name, _batch([b"d"]))
    assert (first.error_code, first.base_offset, second.base_offset) == (0, 0, 3)
    data = _fetch(wire, topic_name, 1)  # the batch containing offset 1 comes back whole
    assert data.error_code == 0 and data.high_watermark == 4 and data.last_stable_offset == 4
    batches = list(iter_batches(bytes(data.records)))
    assert [b.base_offset for b in batches] == [0, 3]
    assert all(b.crc_ok() for b in batches)
    assert [r.value for b in batches for r in decode_records(b)] == [b"a", b"b", b"c", b"d"]


def test_fetch_out_of_range_and_unknown_partition(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    _produce(wire, topic_name, _batch([b"x"]))
    assert _fetch(wire, topic_name, 5).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert _fetch(wire, topic_name, -1).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert _fetch(wire, "no-such-topic", 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_long_poll_is_woken_by_an_append(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    producer = Wire(grete_broker.host, grete_broker.port)
    req = FetchRequest(replica_id=-1, max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=topic_name, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    started = time.monotonic()
    wire.send(req, 12)
    time.sleep(0.2)
    _produce(producer, topic_name, _batch([b"wake"]))
    data = wire.receive(FetchResponse, 12).responses[0].partitions[0]
    elapsed = time.monotonic() - started
    producer.close()
    assert data.high_watermark == 1 and data.records
    assert elapsed < 5, "the fetch waited for max_wait_ms instead of being woken"


def test_long_poll_times_out_with_no_data(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    started = time.monotonic()
    data = _fetch(wire, topic_name, 0, max_wait_ms=300)
    assert 0.25 < time.monotonic() - started < 5
    assert data.error_code == 0 and not data.records


@pytest.mark.parametrize("mutate, code", [
    (lambda b: b.__setitem__(slice(0, 8), (5).to_bytes(8, "big")), ErrorCode.INVALID_RECORD),  # base offset != 0
    (lambda b: b.__setitem__(70, b[70] ^ 0xFF), ErrorCode.CORRUPT_MESSAGE),                    # CRC mismatch
    (lambda b: b.__setitem__(16, 1), ErrorCode.INVALID_RECORD),                                # magic 1 in v3+
    (lambda b: b.extend(b"\x00\x00"), ErrorCode.CORRUPT_MESSAGE),                              # trailing bytes
])
def test_produce_validation_error_codes(grete_broker, wire, topic_name, mutate, code):
    grete_broker.create_topic(topic_name)
    batch = _batch([b"hello world"])
    mutate(batch)
    assert _produce(wire, topic_name, batch).error_code == code
    assert _produce(wire, topic_name, _batch([b"fine"])).base_offset == 0  # nothing was appended


def test_control_batch_from_client_is_invalid_record(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    assert _produce(wire, topic_name, _batch([b"x"], control=True)).error_code == ErrorCode.INVALID_RECORD


def test_message_too_large_and_compacted_topic_needs_keys(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name, configs={"max.message.bytes": "200"})
    assert _produce(wire, topic_name, _batch([b"x" * 300])).error_code == ErrorCode.MESSAGE_TOO_LARGE
    compacted = topic_name + "-c"
    grete_broker.create_topic(compacted, configs={"cleanup.policy": "compact"})
    resp = _produce(wire, compacted, _batch([b"v1", b"v2"], keys=[b"k", None]))
    assert resp.error_code == ErrorCode.INVALID_RECORD
    assert _produce(wire, compacted, _batch([b"v1"], keys=[b"k"])).error_code == 0


def test_invalid_acks_and_unknown_topic(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    assert _produce(wire, topic_name, _batch([b"x"]), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert _produce(wire, "absent-topic", _batch([b"x"])).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_acks_zero_gets_no_response_and_is_appended(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    _produce(wire, topic_name, _batch([b"fire"]), acks=0)
    data = _fetch(wire, topic_name, 0)  # the next response on this connection is the fetch's
    assert data.high_watermark == 1


def test_log_append_time_is_stamped(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    resp = _produce(wire, topic_name, _batch([b"x"], base_timestamp=1000))
    assert resp.log_append_time_ms >= before
    batch = RecordBatch(bytes(_fetch(wire, topic_name, 0).records))
    assert batch.timestamp_type == 1 and batch.max_timestamp == resp.log_append_time_ms and batch.crc_ok()


def test_idempotent_duplicates_get_original_offsets_and_gaps_are_rejected(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    def batch(seq, n=2):
        return _batch([b"v"] * n, producer_id=77, producer_epoch=0, base_sequence=seq)
    assert _produce(wire, topic_name, batch(0)).base_offset == 0
    assert _produce(wire, topic_name, batch(2)).base_offset == 2
    dup = _produce(wire, topic_name, batch(0))
    assert (dup.error_code, dup.base_offset) == (0, 0)
    assert _produce(wire, topic_name, batch(9)).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _fetch(wire, topic_name, 0).high_watermark == 4


def test_list_offsets_earliest_latest_and_timestamps(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    _produce(wire, topic_name, _batch([b"a", b"b"], base_timestamp=1000))   # ts 1000, 1001
    _produce(wire, topic_name, _batch([b"c"], base_timestamp=5000))
    def lookup(ts, isolation=0):
        req = ListOffsetsRequest(replica_id=-1, isolation_level=isolation, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic_name, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=ts)])])
        p = wire.call(req, ListOffsetsResponse, 7).topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp
    assert lookup(-2) == (0, 0, -1)
    assert lookup(-1) == (0, 3, -1)
    assert lookup(-1, isolation=1) == (0, 3, -1)
    assert lookup(1001) == (0, 1, 1001)
    assert lookup(2000) == (0, 2, 5000)
    assert lookup(9999) == (0, -1, -1)
    assert lookup(-3) == (0, 2, 5000)


def test_large_answers_to_a_slow_reader_arrive_whole_and_in_order(grete_broker, wire, topic_name):
    """Answers bigger than the socket buffers are sent in pieces (what the socket takes now, the
    rest when it drains); pipelined, they must still arrive whole and in request order."""
    import socket
    import struct

    from grete.protocol.codec import Reader
    from grete.testing._wire import _exact

    grete_broker.create_topic(topic_name)
    value = bytes(range(256)) * 256  # 64 KB records, four per batch
    for _ in range(40):
        assert _produce(wire, topic_name, _batch([value] * 4)).error_code == 0
    slow = Wire.__new__(Wire)
    slow.sock, slow.correlation_id = socket.socket(), 0
    slow.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    slow.sock.settimeout(10)
    slow.sock.connect((grete_broker.host, grete_broker.port))
    offsets = [0, 12, 40, 100, 4, 150]
    ids = [slow.send(FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        topics=[FetchRequest.FetchTopic(topic=topic_name, partitions=[
            FetchRequest.FetchPartition(partition=0, fetch_offset=o, partition_max_bytes=1 << 20)])]), 12)
        for o in offsets]
    time.sleep(0.3)  # the broker fills the socket and holds the rest
    for offset, correlation_id in zip(offsets, ids, strict=True):
        frame = _exact(slow.sock, struct.unpack(">i", _exact(slow.sock, 4))[0])
        r = Reader(frame)
        assert r.int32() == correlation_id
        r.tagged_fields()  # response header v1
        resp = FetchResponse.decode(r, 12)
        records = [(b.base_offset + rec.offset_delta, rec.value)
                   for b in iter_batches(resp.responses[0].partitions[0].records) for rec in decode_records(b)]
        first = records[0][0]
        assert first <= offset < first + 4 and len(records) >= 12
        assert [o for o, _ in records] == list(range(first, first + len(records)))
        assert all(v == value for _, v in records)
    slow.close()



def test_a_segment_shorter_than_its_answer_closes_the_connection_and_names_the_file(
        grete_broker, wire, topic_name, caplog):
    """A segment cut short underneath the broker is never served past its end: the answer's
    connection is closed, the file and byte are logged, and other clients are still served."""
    import logging
    import os

    grete_broker.create_topic(topic_name)
    value = bytes(64 * 1024)
    for _ in range(4):
        assert _produce(wire, topic_name, _batch([value])).error_code == 0
    (segment,) = (grete_broker.data_dir / f"{topic_name}-0").glob("*.log")
    os.truncate(segment, 100 * 1024)  # inside the second batch
    reader = Wire(grete_broker.host, grete_broker.port)
    with caplog.at_level(logging.WARNING, logger="grete.broker.network.connection"):
        reader.send(FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                 topics=[FetchRequest.FetchTopic(topic=topic_name, partitions=[
                                     FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                                 partition_max_bytes=1 << 20)])]), 12)
        received = 0
        while chunk := reader.sock.recv(1 << 20):
            received += len(chunk)
    assert received < 4 * 64 * 1024  # closed before a whole answer could arrive
    assert f"{segment.resolve()} ends at byte {100 * 1024}" in caplog.text
    reader.close()
    other = _produce(wire, topic_name, _batch([b"after"]), acks=1)  # other clients are still served
    assert other.error_code == 0


def test_list_offsets_max_timestamp_is_exact_to_the_record(grete_broker, wire, topic_name):
    """Three records in one batch with timestamps +100, +400, +200: MAX_TIMESTAMP (-3) names the
    second record (offset 1), as Kafka 3.7+ answers, not the batch's last offset."""
    grete_broker.create_topic(topic_name)
    records = [Record(i, delta, None, b"v") for i, delta in enumerate((100, 400, 200))]
    _produce(wire, topic_name, build_batch(records, base_timestamp=10_000))
    req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic_name, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-3)])])
    p = wire.call(req, ListOffsetsResponse, 7).topics[0].partitions[0]
    assert (p.error_code, p.offset, p.timestamp) == (0, 1, 10_400)
