"""The direct data path on the shm transport: control APIs, produce (exclusive, shared, racing
processes), consume (slots, roll, deletion, read_committed), and TCP clients on the same partition."""

from __future__ import annotations

import multiprocessing
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer as TcpConsumer
from confluent_kafka import Producer as TcpProducer
from confluent_kafka import TopicPartition as TcpTopicPartition
from confluent_kafka.admin import AdminClient

from grete.direct import Consumer, KafkaException, Producer, TopicPartition
from grete.direct.layout import DIRECT_API_KEYS
from grete.direct.producer import murmur2
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from grete.testing import RunningBroker, broker
from grete.testing._wire import Wire
from tests.direct.conftest import consume, produce


def _advertised(servers_host: str, port: int) -> set[int]:
    wire = Wire(servers_host, port)
    try:
        return {k.api_key for k in wire.call(ApiVersionsRequest(), ApiVersionsResponse, 3).api_keys}
    finally:
        wire.close()


def test_off_by_default_not_advertised_and_refused() -> None:
    with broker() as plain:
        assert not _advertised(plain.host, plain.port) & DIRECT_API_KEYS
        with pytest.raises(KafkaException, match="does not offer the direct data path"):
            Producer({"bootstrap.servers": plain.bootstrap_servers})
        # A request for the API anyway: the connection is closed, as for any unknown API key.
        sock = socket.create_connection((plain.host, plain.port), timeout=5)
        body = struct.pack(">hhih", 32000, 0, 1, -1) + b"\x00" + b"\x00" * 8
        sock.sendall(struct.pack(">i", len(body)) + body)
        assert sock.recv(100) == b""
        sock.close()


def test_advertised_when_on(direct_broker: RunningBroker) -> None:
    assert DIRECT_API_KEYS <= _advertised(direct_broker.host, direct_broker.port)


def test_exclusive_produce_then_consume(direct_broker: RunningBroker, topic: str) -> None:
    servers = direct_broker.bootstrap_servers
    values = [b"value-%d" % i * (i % 50 + 1) for i in range(300)]
    results = produce(servers, topic, values, **{"direct.producer.mode": "exclusive", "batch.size": 4096})
    assert [err for err, _ in results] == [None] * 300
    assert [offset for _, offset in results] == list(range(300))
    got = consume(servers, topic, 300)
    assert [(m.offset(), m.key(), m.value(), m.error()) for m in got] == [
        (i, b"k%d" % i, v, None) for i, v in enumerate(values)]


def test_one_exclusive_producer_per_partition(direct_broker: RunningBroker, topic: str) -> None:
    servers = direct_broker.bootstrap_servers
    first = Producer({"bootstrap.servers": servers, "direct.producer.mode": "exclusive"})
    second = Producer({"bootstrap.servers": servers, "direct.producer.mode": "exclusive"})
    shared = Producer({"bootstrap.servers": servers})
    try:
        first.produce(topic, b"a", partition=0)
        assert first.flush(5) == 0
        errors: list[object] = []
        second.produce(topic, b"b", partition=0, on_delivery=lambda err, msg: errors.append(err))
        shared.produce(topic, b"c", partition=0, on_delivery=lambda err, msg: errors.append(err))
        second.flush(5)
        shared.flush(5)
        assert [e.code() for e in errors] == [ErrorCode.PRODUCER_FENCED] * 2  # type: ignore[attr-defined]
        first.close()  # its session ends: the grant is revoked (once the broker has seen it go)
        delivered: list[object] = [errors[0]]
        deadline = time.monotonic() + 10
        while delivered[-1] is not None and time.monotonic() < deadline:
            second.produce(topic, b"d", partition=0, on_delivery=lambda err, msg: delivered.append(err))
            assert second.flush(5) == 0
        assert delivered[-1] is None
    finally:
        second.close()
        shared.close()
    assert [m.value() for m in consume(servers, topic, 2)] == [b"a", b"d"]


def _shared_writer(servers: str, topic: str, writer: int, count: int, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    producer = Producer({"bootstrap.servers": servers, "batch.size": 600})
    errors: list[str] = []
    for i in range(count):
        producer.produce(topic, b"w%d-%d" % (writer, i), partition=0,
                         on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
        if i % 7 == 0:
            producer.poll(0)
    left = producer.flush(20)
    producer.close()
    out.put((writer, left, errors))


def test_shared_producers_race_on_the_ordering_word(direct_broker: RunningBroker, topic: str) -> None:
    """Four processes reserve space with fetch-and-add in one shared region (65 KiB, so regions fill
    and are replaced mid-run); every record lands exactly once, in each writer's order."""
    servers, writers, count = direct_broker.bootstrap_servers, 4, 1500
    # Spawned, not forked: a fork copies the locks other threads of this process (librdkafka's, from
    # earlier tests) hold at that moment, and a child then waits on one for ever.
    spawn = multiprocessing.get_context("spawn")
    queue: multiprocessing.Queue = spawn.Queue()  # type: ignore[type-arg]
    procs = [spawn.Process(target=_shared_writer, args=(servers, topic, w, count, queue)) for w in range(writers)]
    for p in procs:
        p.start()
    reports = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert sorted((w, left, errors) for w, left, errors in reports) == [(w, 0, []) for w in range(writers)]
    got = consume(servers, topic, writers * count, timeout=30)
    assert [m.offset() for m in got] == list(range(writers * count))
    for w in range(writers):
        mine = [m.value() for m in got if m.value().startswith(b"w%d-" % w)]  # type: ignore[union-attr]
        assert mine == [b"w%d-%d" % (w, i) for i in range(count)]


def test_tcp_and_direct_clients_on_one_partition_read_identical_records(
        direct_broker: RunningBroker, topic: str) -> None:
    servers = direct_broker.bootstrap_servers
    tcp = TcpProducer({"bootstrap.servers": servers, "linger.ms": 0})
    for i in range(50):
        tcp.produce(topic, b"tcp-%d" % i, key=b"t%d" % i, partition=0)
        if i % 10 == 0:
            tcp.flush(10)
            produce(servers, topic, [b"direct-%d" % i])
    assert tcp.flush(10) == 0
    direct = [(m.offset(), m.key(), m.value()) for m in consume(servers, topic, 55)]
    assert len(direct) == 55
    reader = TcpConsumer({"bootstrap.servers": servers, "group.id": f"g-{topic}", "enable.auto.commit": False})
    reader.assign([TcpTopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + 20
    while len(seen) < 55 and time.monotonic() < deadline:
        m = reader.poll(0.5)
        if m is not None and m.error() is None:
            seen.append((m.offset(), m.key(), m.value()))
    reader.close()
    assert seen == direct
    assert sorted(v for _, _, v in direct if v.startswith(b"direct")) == sorted(b"direct-%d" % i for i in range(0, 50, 10))


def test_consumer_follows_appends_and_rolls(direct_broker: RunningBroker) -> None:
    servers = direct_broker.bootstrap_servers
    direct_broker.create_topic("direct-roll", 1, {"segment.bytes": "2000"})
    consumer = Consumer({"bootstrap.servers": servers, "auto.offset.reset": "earliest"})
    consumer.subscribe(["direct-roll"])
    got: list[bytes] = []
    for round_ in range(5):
        results = produce(servers, "direct-roll", [b"r%d-%d" % (round_, i) * 20 for i in range(20)],
                          **{"batch.size": 500})
        assert {err for err, _ in results} == {None}
        deadline = time.monotonic() + 10
        while len(got) < 20 * (round_ + 1) and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())  # type: ignore[arg-type]
    consumer.close()
    assert got == [b"r%d-%d" % (r, i) * 20 for r in range(5) for i in range(20)]
    segments = list((direct_broker.data_dir / "direct-roll-0").glob("*.log"))
    assert len(segments) > 3  # the reads crossed several rolled segments


def test_reading_a_deleted_segment_is_a_clean_error(direct_broker: RunningBroker) -> None:
    servers = direct_broker.bootstrap_servers
    direct_broker.create_topic("direct-deleted", 1, {"segment.bytes": "1000"})
    produce(servers, "direct-deleted", [b"x" * 300 for _ in range(12)], **{"batch.size": 1})
    consumer = Consumer({"bootstrap.servers": servers, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition("direct-deleted", 0, 0)])
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.delete_records([TcpTopicPartition("direct-deleted", 0, 9)]).values():
        future.result(10)
    first = consumer.poll(5)
    assert first is not None and first.error() is not None
    assert first.error().code() == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[union-attr]
    rest = [consumer.poll(5) for _ in range(3)]
    consumer.close()
    assert [(m.offset(), m.error()) for m in rest if m is not None] == [(9, None), (10, None), (11, None)]


def test_read_committed_stops_at_the_lso_and_drops_aborted(direct_broker: RunningBroker, topic: str) -> None:
    servers = direct_broker.bootstrap_servers
    txn = TcpProducer({"bootstrap.servers": servers, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(10)
    txn.begin_transaction()
    txn.produce(topic, b"aborted-1", partition=0)
    txn.flush(10)
    txn.abort_transaction(10)
    txn.begin_transaction()
    txn.produce(topic, b"committed-1", partition=0)
    txn.commit_transaction(10)
    txn.begin_transaction()
    txn.produce(topic, b"open-1", partition=0)
    txn.flush(10)
    committed = consume(servers, topic, 1, **{"isolation.level": "read_committed"})
    committed += consume(servers, topic, 1, offset=committed[-1].offset() + 1, timeout=0.5,
                         **{"isolation.level": "read_committed"})  # nothing more below the LSO
    everything = consume(servers, topic, 3, timeout=5)
    txn.abort_transaction(10)
    assert [m.value() for m in committed] == [b"committed-1"]
    assert [m.value() for m in everything] == [b"aborted-1", b"committed-1", b"open-1"]


def test_offset_below_the_log_start_is_refused(direct_broker: RunningBroker, topic: str) -> None:
    consumer = Consumer({"bootstrap.servers": direct_broker.bootstrap_servers})
    consumer.assign([TopicPartition(topic, 0, 5)])  # beyond the end of an empty partition
    message = consumer.poll(1)
    consumer.close()
    assert message is not None and message.error().code() == ErrorCode.OFFSET_OUT_OF_RANGE  # type: ignore[union-attr]


def test_keys_headers_timestamps_and_nulls_survive(direct_broker: RunningBroker, topic: str) -> None:
    servers = direct_broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": servers})
    producer.produce(topic, None, key=b"tombstone", partition=0, timestamp=1_700_000_000_000)
    producer.produce(topic, b"v" * 20000, key=None, partition=0, timestamp=1_700_000_000_500,
                     headers=[("h1", b"x"), ("h2", None)])
    assert producer.flush(10) == 0
    producer.close()
    got = consume(servers, topic, 2)
    assert [(m.key(), m.value(), m.timestamp(), m.headers()) for m in got] == [
        (b"tombstone", None, (1, 1_700_000_000_000), None),
        (None, b"v" * 20000, (1, 1_700_000_000_500), [("h1", b"x"), ("h2", None)])]
    reader = TcpConsumer({"bootstrap.servers": servers, "group.id": f"h-{topic}"})
    reader.assign([TcpTopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + 10
    while len(seen) < 2 and time.monotonic() < deadline:
        m = reader.poll(0.5)
        if m is not None and m.error() is None:
            seen.append((m.key(), m.value(), m.timestamp()[1], m.headers()))
    reader.close()
    assert seen == [(b"tombstone", None, 1_700_000_000_000, None),
                    (None, b"v" * 20000, 1_700_000_000_500, [("h1", b"x"), ("h2", None)])]


def test_unpartitioned_records_are_spread_and_keys_hash_like_kafka(direct_broker: RunningBroker) -> None:
    servers = direct_broker.bootstrap_servers
    direct_broker.create_topic("direct-keys", 3)
    producer = Producer({"bootstrap.servers": servers})
    where: list[tuple[bytes | None, int]] = []
    for _ in range(6):
        producer.produce("direct-keys", b"v", key=None, on_delivery=lambda e, m: where.append((m.key(), m.partition())))
    producer.produce("direct-keys", b"v", key=b"user-42", on_delivery=lambda e, m: where.append((m.key(), m.partition())))
    assert producer.flush(10) == 0
    producer.close()
    assert {p for k, p in where if k is None} == {0, 1, 2}
    assert (b"user-42", (murmur2(b"user-42") & 0x7FFFFFFF) % 3) in where


def test_a_deleted_file_already_read_to_its_end_is_no_error(direct_broker: RunningBroker) -> None:
    """The consumer's offset is still in the log (it had read the whole file): it just moves on."""
    servers = direct_broker.bootstrap_servers
    direct_broker.create_topic("direct-moved", 1, {"segment.bytes": "1000"})
    produce(servers, "direct-moved", [b"y" * 300 for _ in range(6)], **{"batch.size": 1})
    consumer = Consumer({"bootstrap.servers": servers})
    consumer.assign([TopicPartition("direct-moved", 0, 0)])
    first = [consumer.poll(5) for _ in range(2)]
    assert [(m.offset(), m.error()) for m in first if m is not None] == [(0, None), (1, None)]
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.delete_records([TcpTopicPartition("direct-moved", 0, 2)]).values():
        future.result(10)
    rest = [consumer.poll(5) for _ in range(4)]
    consumer.close()
    assert [(m.offset(), m.error()) for m in rest if m is not None] == [(i, None) for i in range(2, 6)]


def test_a_full_queue_raises_buffer_error_until_served(direct_broker: RunningBroker, topic: str) -> None:
    producer = Producer({"bootstrap.servers": direct_broker.bootstrap_servers,
                         "queue.buffering.max.messages": 3, "batch.size": 1})
    for i in range(3):
        producer.produce(topic, b"%d" % i, partition=0)
    assert len(producer) == 3
    with pytest.raises(BufferError):
        producer.produce(topic, b"3", partition=0)
    assert producer.flush(10) == 0 and len(producer) == 0
    producer.produce(topic, b"3", partition=0)
    assert producer.flush(10) == 0
    producer.close()
    assert [m.value() for m in consume(direct_broker.bootstrap_servers, topic, 4)] == [b"0", b"1", b"2", b"3"]
