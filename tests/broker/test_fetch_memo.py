"""The repeated-empty-fetch short cut (network/fetch_memo.py ``FetchMemo`` + replica/fetch_watch.py ``Snapshot``) must only
ever repeat an answer that is still true: new data, a moved high watermark or log start, a deleted
topic and a leader epoch change must all show on the very next identical request."""

from __future__ import annotations

import struct
import time

import pytest

from grete.protocol.codec import Reader
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
)
from grete.protocol.records.record import Record, build_batch
from grete.testing._wire import Wire

VERSION = 12


def _request(topic: str, offset: int, *, max_wait_ms: int = 0, leader_epoch: int = -1,
             min_bytes: int = 1) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20,
            current_leader_epoch=leader_epoch)])])


def _raw(wire: Wire) -> bytes:
    """One response frame, size prefix stripped: correlation id first."""
    size = struct.unpack(">i", _exact(wire, 4))[0]
    return _exact(wire, size)


def _exact(wire: Wire, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = wire.sock.recv(n - len(out))
        assert chunk, "broker closed the connection"
        out += chunk
    return bytes(out)


def _decode(frame: bytes) -> FetchResponse.PartitionData:
    r = Reader(frame)
    r.int32()
    r.tagged_fields()
    return FetchResponse.decode(r, VERSION).responses[0].partitions[0]


def _fetch(wire: Wire, request: FetchRequest) -> FetchResponse.PartitionData:
    wire.send(request, VERSION)
    return _decode(_raw(wire))


def _produce(broker, topic: str, values: list[bytes]) -> None:
    batch = build_batch([Record(i, i, None, v) for i, v in enumerate(values)])
    wire = Wire(broker.host, broker.port)
    try:
        response = wire.call(ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[ProduceRequest.TopicProduceData(
            name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])]),
            ProduceResponse, 9)
    finally:
        wire.close()
    assert response.responses[0].partition_responses[0].error_code == 0


def _memos(broker) -> int:
    """Connections holding a remembered empty fetch: proves a test went through the short cut."""
    return int(broker.call(lambda: sum(c._fetch_memo is not None for c in broker.broker.connections)))


@pytest.fixture
def wire(grete_broker):
    w = Wire(grete_broker.host, grete_broker.port)
    yield w
    w.close()


@pytest.fixture
def idle(grete_broker, wire, topic_name):
    """An existing 1-partition topic and a connection that has just had one empty fetch at offset 0."""
    grete_broker.create_topic(topic_name)
    first = _fetch(wire, _request(topic_name, 0))
    assert first.error_code == 0 and not first.records and first.high_watermark == 0
    assert _memos(grete_broker) == 1
    return topic_name


def test_repeats_are_byte_identical_apart_from_their_own_correlation_ids(grete_broker, wire, idle):
    request = _request(idle, 0)
    ids = [wire.send(request, VERSION) for _ in range(5)]  # pipelined
    frames = [_raw(wire) for _ in ids]
    assert [struct.unpack(">i", f[:4])[0] for f in frames] == ids
    assert len({f[4:] for f in frames}) == 1
    # The same request on a fresh connection takes the full path: the bytes must agree with it.
    other = Wire(grete_broker.host, grete_broker.port)
    try:
        full = other.send(request, VERSION) and _raw(other)
    finally:
        other.close()
    assert full[4:] == frames[0][4:]


def test_new_data_is_served_on_the_next_identical_fetch(grete_broker, wire, idle):
    assert not _fetch(wire, _request(idle, 0)).records
    _produce(grete_broker, idle, [b"a", b"b"])
    data = _fetch(wire, _request(idle, 0))
    assert data.error_code == 0 and data.high_watermark == 2 and data.records


def test_a_moved_high_watermark_shows_even_when_the_fetch_offset_is_still_at_the_end(grete_broker, wire,
                                                                                     topic_name):
    grete_broker.create_topic(topic_name)
    _produce(grete_broker, topic_name, [b"a"])
    assert _fetch(wire, _request(topic_name, 1)).high_watermark == 1
    assert _fetch(wire, _request(topic_name, 1)).high_watermark == 1  # from the memo
    _produce(grete_broker, topic_name, [b"b", b"c"])
    data = _fetch(wire, _request(topic_name, 1))
    assert data.high_watermark == 3 and data.records


def test_a_moved_log_start_offset_shows(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    _produce(grete_broker, topic_name, [b"a", b"b"])
    assert _fetch(wire, _request(topic_name, 2)).log_start_offset == 0
    assert _fetch(wire, _request(topic_name, 2)).log_start_offset == 0
    deleted = wire.call(DeleteRecordsRequest(timeout_ms=5000, topics=[DeleteRecordsRequest.DeleteRecordsTopic(
        name=topic_name, partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=2)])]),
        DeleteRecordsResponse, 2)
    assert deleted.topics[0].partitions[0].error_code == 0
    data = _fetch(wire, _request(topic_name, 2))
    assert data.error_code == 0 and data.log_start_offset == 2 and data.high_watermark == 2


def test_a_deleted_topic_is_not_answered_from_the_memo(grete_broker, wire, idle):
    assert not _fetch(wire, _request(idle, 0)).records
    grete_broker.call(lambda: grete_broker.broker.delete_topic(idle))
    assert _fetch(wire, _request(idle, 0)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    grete_broker.create_topic(idle)  # same name, a new partition object
    again = _fetch(wire, _request(idle, 0))
    assert again.error_code == 0 and again.high_watermark == 0
    _produce(grete_broker, idle, [b"new"])
    assert _fetch(wire, _request(idle, 0)).records


def test_a_leader_epoch_change_fences_the_next_identical_fetch(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    partition = grete_broker.broker.partitions[(topic_name, 0)]
    epoch = partition.leader_epoch
    request = _request(topic_name, 0, leader_epoch=epoch)
    assert _fetch(wire, request).error_code == 0
    assert _fetch(wire, request).error_code == 0
    assert _memos(grete_broker) == 1
    grete_broker.call(lambda: setattr(partition, "leader_epoch", epoch + 1))
    assert _fetch(wire, request).error_code == ErrorCode.FENCED_LEADER_EPOCH


def test_a_repeated_long_poll_still_waits_and_is_still_woken(grete_broker, wire, topic_name):
    grete_broker.create_topic(topic_name)
    request = _request(topic_name, 0, max_wait_ms=600)
    started = time.monotonic()
    assert not _fetch(wire, request).records            # full path: times out empty
    assert _memos(grete_broker) == 1
    middle = time.monotonic()
    assert not _fetch(wire, request).records            # memo path: must wait too
    waited = time.monotonic() - middle
    assert middle - started >= 0.55 and waited >= 0.55
    wire.send(request, VERSION)                          # memo path, woken by an append
    sent = time.monotonic()
    time.sleep(0.1)
    _produce(grete_broker, topic_name, [b"wake"])
    data = _decode(_raw(wire))
    assert time.monotonic() - sent < 0.5, "the parked repeat was not woken by the append"
    assert data.high_watermark == 1 and data.records


def test_a_woken_repeat_still_honours_min_bytes_and_the_original_deadline(grete_broker, wire, topic_name):
    """A small append wakes the parked repeat, but min_bytes is not reached: it must wait on until
    max_wait_ms from its arrival (not answer early, not start a fresh max_wait_ms)."""
    grete_broker.create_topic(topic_name)
    request = _request(topic_name, 0, max_wait_ms=800, min_bytes=100_000)
    assert not _fetch(wire, request).records             # full path: creates the memo
    wire.send(request, VERSION)                          # memo path
    sent = time.monotonic()
    time.sleep(0.2)
    _produce(grete_broker, topic_name, [b"small"])
    data = _decode(_raw(wire))
    elapsed = time.monotonic() - sent
    assert 0.7 < elapsed < 1.4, elapsed
    assert data.high_watermark == 1 and data.records


def test_faults_see_every_fetch(grete_broker, wire, idle):
    """With faults installed the short cut is off, so an injected Fetch error reaches the client."""
    with grete_broker.faults.fail("Fetch", error=ErrorCode.NOT_LEADER_OR_FOLLOWER):
        assert _fetch(wire, _request(idle, 0)).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert _fetch(wire, _request(idle, 0)).error_code == 0


@pytest.mark.grete_overrides(**{"connections.max.idle.ms": "300"})
def test_activity_keeps_a_connection_past_the_idle_timeout_and_silence_closes_it(grete_broker, topic_name):
    """connection.py notes activity per read and re-arms one idle timer on expiry (no timer per read):
    a connection used every 100 ms must outlive several 300 ms periods, and close once silent."""
    grete_broker.create_topic(topic_name)
    wire = Wire(grete_broker.host, grete_broker.port)
    try:
        for _ in range(12):  # 1.2 s of repeated (memo-answered) empty fetches
            assert _fetch(wire, _request(topic_name, 0)).error_code == 0
            time.sleep(0.1)
        time.sleep(1.0)
        wire.sock.settimeout(5)
        assert wire.sock.recv(1) == b""  # closed by the broker
    finally:
        wire.close()


def test_a_log_start_moved_without_a_wake_shows_at_the_deadline_of_a_parked_repeat(grete_broker, wire,
                                                                                   topic_name):
    """Retention moves the log start without waking parked fetches. A repeat that waits on a memo
    whose watch is still parked compares the values at its deadline (not on arrival): it answers
    then, with the new log start, as the handler would have (nothing to read, so it waits too)."""
    grete_broker.create_topic(topic_name)
    _produce(grete_broker, topic_name, [b"a", b"b"])
    request = _request(topic_name, 2, max_wait_ms=300)
    assert _fetch(wire, request).log_start_offset == 0       # full path
    assert _fetch(wire, request).log_start_offset == 0       # memo path: the watch is parked now
    log = grete_broker.broker.partitions[(topic_name, 0)]._log
    grete_broker.call(lambda: setattr(log, "log_start_offset", 1))
    started = time.monotonic()
    data = _fetch(wire, request)
    assert time.monotonic() - started >= 0.25
    assert data.error_code == 0 and data.log_start_offset == 1 and not data.records
    assert _fetch(wire, request).log_start_offset == 1


@pytest.mark.grete_overrides(**{"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                                "allow.everyone.if.no.acl.found": "true"})
def test_a_revoked_read_is_not_answered_from_the_memo(grete_broker, wire, idle):
    """An ACL change reaches the next repeat: it is authorized again, as every Fetch is in Kafka."""
    deny = CreateAclsRequest(creations=[CreateAclsRequest.AclCreation(
        resource_type=2, resource_name=idle, resource_pattern_type=3, principal="User:ANONYMOUS", host="*",
        operation=3, permission_type=2)])  # TOPIC, LITERAL, READ, DENY
    admin = Wire(grete_broker.host, grete_broker.port)
    try:
        assert admin.call(deny, CreateAclsResponse, 3).results[0].error_code == 0
    finally:
        admin.close()
    again = _fetch(wire, _request(idle, 0))
    assert again.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
