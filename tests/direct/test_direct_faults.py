"""Bad input and crashes on the direct path: each gets a clear answer, nothing acknowledged is lost,
and nothing that failed is ever readable."""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import time
from pathlib import Path

from confluent_kafka import Consumer as TcpConsumer
from confluent_kafka import TopicPartition as TcpTopicPartition

from grete.direct import Consumer, TopicPartition
from grete.direct.control import Control
from grete.direct.layout import ACK, NOTIFY, ORDER_WORD, reservation_delta, split_word
from grete.direct.shm import ShmChannel, ShmRegion
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import DirectProduceAddressRequest, DirectProduceAddressResponse
from grete.protocol.records.record import build_batch, simple_records
from grete.testing import RunningBroker
from grete.testing.process import broker_process
from tests.direct.conftest import DIRECT, consume, produce

# Children are spawned, not forked: a fork copies locks that threads of earlier tests (librdkafka's,
# the broker's) hold, and a child could hang on one.
SPAWN = multiprocessing.get_context("spawn")


class RawProducer:
    """The wire of the direct path by hand: a session, a grant, reservations and announcements."""

    def __init__(self, servers: str, topic: str, exclusive: bool = False) -> None:
        self.control = Control(servers, "raw")
        hello = self.control.call(DirectProduceAddressRequest(transport="shm", session_id=-1, topics=[]),
                                  DirectProduceAddressResponse, 0)
        self.channel = ShmChannel(hello.endpoint)
        self.grant = self.control.call(DirectProduceAddressRequest(
            transport="shm", session_id=self.channel.session_id,
            topics=[DirectProduceAddressRequest.DirectProduceTopic(name=topic, partitions=[
                DirectProduceAddressRequest.DirectProducePartition(index=0, exclusive=exclusive)])]),
            DirectProduceAddressResponse, 0).topics[0].partitions[0]
        assert self.grant.error_code == 0
        self.region = ShmRegion(self.grant.region_address, self.grant.data_offset + self.grant.data_length,
                                writable=True)

    def reserve(self, size: int) -> tuple[int, int]:
        return split_word(self.region.fetch_add(ORDER_WORD, reservation_delta(size)))

    def write(self, offset: int, data: bytes | bytearray) -> None:
        self.region.write(self.grant.data_offset + offset, data)

    def announce(self, order: int, offset: int, length: int, key: int | None = None) -> None:
        self.channel.notify(NOTIFY.pack(self.grant.region_key if key is None else key, self.grant.region_id,
                                        order, 0, offset, length))

    def answers(self, count: int, timeout: float = 5.0) -> list[tuple[int, int, int]]:
        """(order, error code, base offset) of the next ``count`` answers."""
        out: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for frame in self.channel.completions(0.2):
                _, order, code, base, _ = ACK.unpack(frame)
                out.append((order, code, base))
        return out

    def close(self) -> None:
        self.channel.close()
        self.control.close()


def _batch(*values: bytes) -> bytearray:
    return build_batch(simple_records(list(values)))


def _log_values(servers: str, topic: str) -> list[bytes]:
    """Everything readable, through a TCP consumer (the reference view of the log)."""
    reader = TcpConsumer({"bootstrap.servers": servers, "group.id": f"check-{topic}",
                          "enable.auto.commit": False, "enable.partition.eof": True})
    reader.assign([TcpTopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = reader.poll(0.5)
        if m is None:
            continue
        if m.error() is not None:
            break  # end of partition
        values.append(m.value())
    reader.close()
    return values


def test_a_batch_with_a_wrong_crc_is_refused_and_never_readable(direct_broker: RunningBroker, topic: str) -> None:
    servers = direct_broker.bootstrap_servers
    raw = RawProducer(servers, topic)
    bad = _batch(b"corrupt")
    bad[-1] ^= 0xFF  # a record byte: the CRC no longer matches
    good = _batch(b"fine")
    order1, off1 = raw.reserve(len(bad))
    order2, off2 = raw.reserve(len(good))
    raw.write(off1, bad)
    raw.write(off2, good)
    raw.announce(order1, off1, len(bad))
    raw.announce(order2, off2, len(good))
    assert raw.answers(2) == [(order1, ErrorCode.CORRUPT_MESSAGE, -1), (order2, 0, 0)]
    raw.close()
    assert _log_values(servers, topic) == [b"fine"]
    assert [m.value() for m in consume(servers, topic, 1)] == [b"fine"]


def test_an_announcement_outside_its_reservation_is_refused(direct_broker: RunningBroker, topic: str) -> None:
    servers = direct_broker.bootstrap_servers
    raw = RawProducer(servers, topic)
    batch = _batch(b"mine")
    order, offset = raw.reserve(len(batch))
    raw.write(offset + 1000, batch)  # written and announced somewhere it did not reserve
    raw.announce(order, offset + 1000, len(batch))
    assert raw.answers(1) == [(order, ErrorCode.INVALID_REQUEST, -1)]
    # The region is sealed: what comes after is fenced, and a fresh grant works.
    raw.announce((order + 1) & 0xFFFF, offset + len(batch), len(batch))
    assert raw.answers(1)[0][1] == ErrorCode.PRODUCER_FENCED
    raw.close()
    results = produce(servers, topic, [b"after"])
    assert results == [(None, 0)]
    assert _log_values(servers, topic) == [b"after"]


def test_past_the_end_of_the_region_is_refused(direct_broker: RunningBroker, topic: str) -> None:
    raw = RawProducer(direct_broker.bootstrap_servers, topic, exclusive=True)
    raw.announce(0, 0, raw.grant.data_length + 100)
    assert raw.answers(1) == [(0, ErrorCode.INVALID_REQUEST, -1)]
    raw.close()


def test_a_stale_key_is_fenced(direct_broker: RunningBroker, topic: str) -> None:
    servers = direct_broker.bootstrap_servers
    raw = RawProducer(servers, topic)
    batch = _batch(b"stale")
    order, offset = raw.reserve(len(batch))
    raw.write(offset, batch)
    raw.announce(order, offset, len(batch), key=raw.grant.region_key ^ 1)
    assert raw.answers(1) == [(order, ErrorCode.PRODUCER_FENCED, -1)]
    raw.close()
    assert _log_values(servers, topic) == []


def _reserve_and_die(address: str, length: int, size: int, ready: multiprocessing.Event) -> None:  # type: ignore[type-arg]
    region = ShmRegion(address, length, writable=True)
    _, offset = split_word(region.fetch_add(ORDER_WORD, reservation_delta(size)))
    region.write(4096 + offset, b"\xde\xad" * (size // 2))  # half a batch of garbage, never announced
    ready.set()
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_producer_killed_mid_write_leaves_a_clean_log(direct_broker: RunningBroker, topic: str) -> None:
    """A shared producer reserves, writes garbage and dies before announcing. Writers behind it are
    held up until direct.produce.timeout.ms, then the region is sealed, they are fenced and resend:
    every acknowledged record is in the log once, and none of the dead producer's bytes is."""
    servers = direct_broker.bootstrap_servers
    before = RawProducer(servers, topic)  # registers the shared region
    first = _batch(b"before")
    order, offset = before.reserve(len(first))
    before.write(offset, first)
    before.announce(order, offset, len(first))
    assert before.answers(1) == [(order, 0, 0)]
    ready = SPAWN.Event()
    dead = SPAWN.Process(target=_reserve_and_die, args=(
        before.grant.region_address, before.grant.data_offset + before.grant.data_length, 400, ready))
    dead.start()
    assert ready.wait(10)
    dead.join(10)
    assert dead.exitcode == -signal.SIGKILL
    start = time.monotonic()
    results = produce(servers, topic, [b"after-%d" % i for i in range(5)])
    assert [err for err, _ in results] == [None] * 5
    assert time.monotonic() - start >= 0.3  # it waited for the timeout, then went through a new region
    before.close()
    assert _log_values(servers, topic) == [b"before"] + [b"after-%d" % i for i in range(5)]


def test_broker_crash_and_restart_keeps_what_was_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with broker_process(DIRECT, data_dir=data, topics={"crash": 1}) as first:
        acked = produce(first.bootstrap_servers, "crash", [b"c%d" % i for i in range(200)],
                        **{"batch.size": 300})
        assert [err for err, _ in acked] == [None] * 200
        first.process.kill()  # no shutdown: regions, sessions and all
        first.process.wait(10)
    with broker_process(DIRECT, data_dir=data) as second:
        got = consume(second.bootstrap_servers, "crash", 200)
        assert [m.value() for m in got] == [b"c%d" % i for i in range(200)]
        assert produce(second.bootstrap_servers, "crash", [b"again"]) == [(None, 200)]


def _assign_and_die(servers: str, topic: str, ready: multiprocessing.Event) -> None:  # type: ignore[type-arg]
    consumer = Consumer({"bootstrap.servers": servers})
    consumer.assign([TopicPartition(topic, 0, 0)])
    ready.set()
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_consumer_that_dies_has_its_slots_freed(direct_broker: RunningBroker, topic: str) -> None:
    def consumers() -> int:
        return int(direct_broker.call(lambda: len(direct_broker.broker.direct.consumers)))  # type: ignore[union-attr]

    before = consumers()
    ready = SPAWN.Event()
    child = SPAWN.Process(target=_assign_and_die, args=(direct_broker.bootstrap_servers, topic, ready))
    child.start()
    assert ready.wait(10)
    child.join(10)
    deadline = time.monotonic() + 5
    while consumers() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert consumers() == before
    assert produce(direct_broker.bootstrap_servers, topic, [b"still served"]) == [(None, 0)]


def test_a_client_that_never_reads_its_answers_is_cut_off(direct_broker: RunningBroker, topic: str) -> None:
    raw = RawProducer(direct_broker.bootstrap_servers, topic)
    sock = raw.channel._sock
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    junk = NOTIFY.pack(raw.grant.region_key ^ 1, raw.grant.region_id, 0, 0, 0, 100)  # a stale key: fenced
    sock.settimeout(10)
    ended = False
    try:
        for _ in range(200):  # 6.5 MB of announcements, 6.5 MB of answers it never reads
            sock.sendall(junk * 1024)
    except (BrokenPipeError, ConnectionResetError):
        ended = True
    if not ended:
        try:  # the broker must have ended the session: reading reaches its end (or a reset)
            while sock.recv(1 << 16):
                pass
            ended = True
        except ConnectionResetError:
            ended = True
        except TimeoutError:
            ended = False
    session = raw.channel.session_id
    raw.close()
    assert ended
    assert produce(direct_broker.bootstrap_servers, topic, [b"others are served"]) == [(None, 0)]
    assert session not in direct_broker.call(lambda: set(direct_broker.broker.direct._sessions))  # type: ignore[union-attr]
