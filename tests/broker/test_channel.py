"""The sans-IO channel parts: frames, buffers that grow with arrived bytes, the request memory pool,
response order, and the writer a transport gets (zero-copy only on plain TCP)."""

from __future__ import annotations

import asyncio
import datetime
import os
import ssl
import tempfile
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.network.channel import ResponseQueue
from grete.broker.quotas.connection_quotas import ConnectionQuotas, parse_overrides
from grete.broker.replica.writers import CopyWriter, ZeroCopyWriter, writer_for
from grete.protocol.errors import ProtocolError
from grete.protocol.framing import BASE_BUFFER, BufferPool, FrameReader, MemoryPool


def _feed(reader: FrameReader, data: bytes) -> None:
    while data:
        room = reader.buffer()
        assert room is not None
        n = min(len(room), len(data))
        room[:n] = data[:n]
        reader.received(n)
        data = data[n:]


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def test_frames_come_out_whole_across_reads() -> None:
    reader = FrameReader(1 << 20, BufferPool(), MemoryPool(-1))
    wire = _frame(b"a" * 10) + _frame(b"b" * 100_000) + _frame(b"")
    _feed(reader, wire[:7])
    assert reader.next_frame() is None
    _feed(reader, wire[7:])
    frames = []
    while (frame := reader.next_frame()) is not None:
        frames.append(bytes(frame))
    assert frames == [b"a" * 10, b"b" * 100_000, b""]


def test_a_claimed_size_allocates_nothing_until_bytes_arrive() -> None:
    reader = FrameReader(100 << 20, BufferPool(), MemoryPool(-1))
    _feed(reader, (100 << 20).to_bytes(4, "big") + b"x" * 10)
    assert reader.next_frame() is None
    assert reader._buf is not None and len(reader._buf) == BASE_BUFFER  # still the pooled base buffer
    _feed(reader, b"x" * (3 * BASE_BUFFER))
    assert 3 * BASE_BUFFER < len(reader._buf) <= 8 * BASE_BUFFER  # doubled with the bytes


def test_frame_size_outside_limits_is_refused() -> None:
    reader = FrameReader(1000, BufferPool(), MemoryPool(-1))
    _feed(reader, (1001).to_bytes(4, "big"))
    with pytest.raises(ProtocolError, match="1001"):
        reader.next_frame()
    reader = FrameReader(1000, BufferPool(), MemoryPool(-1))
    _feed(reader, (-1).to_bytes(4, "big", signed=True))
    with pytest.raises(ProtocolError):
        reader.next_frame()


def test_an_idle_reader_holds_no_buffer() -> None:
    pool = BufferPool()
    reader = FrameReader(1 << 20, pool, MemoryPool(-1))
    _feed(reader, _frame(b"abc"))
    assert reader.next_frame() is not None
    reader.settle()
    assert reader._buf is None and len(pool._free) == 1  # back in the pool for the next reader


def test_a_read_that_brings_no_bytes_takes_no_buffer() -> None:
    # The end of a stream is a read of 0 bytes into the buffer asked for: thousands of connections
    # closing at once must not take (and drop) a 64 KB buffer each to learn it.
    pool = BufferPool()
    readers = [FrameReader(1 << 20, pool, MemoryPool(-1)) for _ in range(3)]
    for reader in readers:
        assert len(reader.buffer()) == BASE_BUFFER
        reader.close()  # no bytes came: the connection is gone
    assert len(pool._free) == 1  # one buffer, lent to each in turn and still the pool's
    reader = FrameReader(1 << 20, pool, MemoryPool(-1))
    _feed(reader, _frame(b"abc")[:5])  # a partial frame, stashed as bytes of its own
    reader.settle()
    assert reader._buf is None and len(pool._free) == 1
    _feed(reader, _frame(b"abc")[5:])  # bytes came: the lent buffer is taken, the stash in front
    assert reader.next_frame() == b"abc" and pool._free == []


def test_memory_pool_reserves_whole_frames_and_admits_while_any_is_left() -> None:
    memory = MemoryPool(1000)
    a, b, c = (FrameReader(10 << 20, BufferPool(), memory) for _ in range(3))
    _feed(a, (800).to_bytes(4, "big") + b"a" * 10)
    assert a.next_frame() is None and memory.used == 800  # the whole frame, from its size alone
    _feed(b, _frame(b"b" * 900)[:20])
    assert b.next_frame() is None and memory.used == 1700  # 200 were left: admitted, below zero
    _feed(c, _frame(b"c" * 5))
    assert c.next_frame() is None and c.starved  # exhausted: c waits, whole as its frame is
    woken: list[bool] = []
    c.when_memory_released(lambda: woken.append(True))
    _feed(a, b"a" * 790)
    assert a.next_frame() == b"a" * 800 and woken == []  # handed out: held until handled
    a.settle()
    assert memory.used == 905 and woken == [True]  # c's turn: its frame's memory reserved for it
    assert c.next_frame() == b"c" * 5 and not c.starved
    c.settle()
    b.close()  # gone mid-frame: its reservation goes back
    assert memory.used == 0



def test_memory_goes_to_the_waiting_in_turn_before_the_reader_that_returned_it() -> None:
    memory = MemoryPool(1000)
    a, b = (FrameReader(10 << 20, BufferPool(), memory) for _ in range(2))
    _feed(a, _frame(b"a" * 1200) + _frame(b"A" * 1200))
    assert a.next_frame() == b"a" * 1200 and memory.used == 1200
    _feed(b, _frame(b"b" * 1000))
    assert b.next_frame() is None and b.starved
    b.settle()  # refused: its whole (small) frame is set aside and the buffer pooled
    woken: list[bool] = []
    b.when_memory_released(lambda: woken.append(True))
    assert a.next_frame() is None and a.starved  # a's memory went to b first: a's next frame waits
    assert woken == [True] and memory.used == 1000
    assert b.next_frame() == b"b" * 1000  # although no byte came since it was set aside
    a.when_memory_released(lambda: woken.append(True))
    b.settle()
    assert woken == [True, True] and a.next_frame() == b"A" * 1200
    a.settle()
    assert memory.used == 0


def test_responses_leave_in_request_order() -> None:
    queue = ResponseQueue(max_pending=4)
    first, second = queue.reserve(), queue.reserve()
    second.parts = [b"2"]
    assert list(queue.ready()) == []
    first.parts = [b"1"]
    assert [slot.parts for slot in queue.ready()] == [[b"1"], [b"2"]]
    for _ in range(4):
        queue.reserve()
    assert queue.full and not queue.drained


class _Arrival:
    """A connection as the quotas see it: what they decided, in order."""

    def __init__(self, peer: str, listener: str = "PLAINTEXT") -> None:
        self.peer, self.listener = peer, listener
        self.events: list[str] = []

    def hold(self) -> None:
        self.events.append("hold")

    def admitted(self) -> None:
        self.events.append("admitted")

    def refuse(self) -> None:
        self.events.append("refused")

    def throttled(self, delay_s: float) -> None:
        self.events.append(f"throttled {delay_s:.1f}")


def test_connection_limits_per_ip_with_overrides() -> None:
    asyncio.run(_connection_limits())


async def _connection_limits() -> None:
    """Over an address's limit a connection is closed; over max.connections it waits, in order,
    until a connection closes (Kafka's acceptor waits for a slot)."""
    config = BrokerConfig({"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "10.0.0.9:0",
                           "max.connections": "3"})
    quotas = ConnectionQuotas(config)

    def arrive(peer: str) -> _Arrival:
        conn = _Arrival(peer)
        quotas.arrive(conn)
        return conn

    assert arrive("127.0.0.1").events == arrive("127.0.0.1").events == ["admitted"]
    assert arrive("127.0.0.1").events == ["refused"]
    assert arrive("10.0.0.9").events == ["refused"]
    assert arrive("127.0.0.2").events == ["admitted"]
    third, fourth = arrive("127.0.0.3"), arrive("127.0.0.4")  # max.connections: both wait
    assert third.events == fourth.events == ["hold"]
    quotas.release("127.0.0.1", "PLAINTEXT")
    assert third.events == ["hold", "admitted"] and fourth.events == ["hold"]
    quotas.depart(fourth)  # its client gave up
    quotas.release("127.0.0.2", "PLAINTEXT")
    assert arrive("127.0.0.5").events == ["admitted"]
    with pytest.raises(ConfigError):
        parse_overrides("nohost")


def test_a_listener_limit_holds_only_its_listener() -> None:
    asyncio.run(_listener_limit())


async def _listener_limit() -> None:
    quotas = ConnectionQuotas(BrokerConfig({"listener.name.external.max.connections": "1"}))
    first, second = _Arrival("10.0.0.1", "EXTERNAL"), _Arrival("10.0.0.2", "EXTERNAL")
    internal = _Arrival("10.0.0.3", "INTERNAL")
    for conn in (first, second, internal):
        quotas.arrive(conn)
    assert (first.events, second.events, internal.events) == (["admitted"], ["hold"], ["admitted"])
    quotas.release("10.0.0.3", "INTERNAL")
    assert second.events == ["hold"]
    third = _Arrival("10.0.0.4", "EXTERNAL")
    quotas.arrive(third)
    quotas.release("10.0.0.1", "EXTERNAL")
    assert second.events == ["hold", "admitted"] and third.events == ["hold"]
    quotas.reload(BrokerConfig({"listener.name.external.max.connections": "2"}))  # raised: waiting ones go on
    assert third.events == ["hold", "admitted"]


def test_creation_rate_holds_the_listener_in_order() -> None:
    """Over max.connection.creation.rate the listener's next connections wait their turn (Kafka's
    acceptor blocks): the one over the rate is held for the throttle time, those behind it after it."""
    asyncio.run(_creation_rate())


async def _creation_rate() -> None:
    quotas = ConnectionQuotas(BrokerConfig({"max.connection.creation.rate": "2", "quota.window.num": "2"}))
    arrivals = [_Arrival("127.0.0.1") for _ in range(4)]
    for conn in arrivals:
        quotas.arrive(conn)
    # A young rate spans one window (quota.window.num - 1) of a second: 2 fit, the third is over.
    assert [c.events for c in arrivals] == [["admitted"], ["admitted"], ["hold"], ["hold"]]
    other = _Arrival("127.0.0.1", "INTERNAL")
    quotas.arrive(other)  # another listener's acceptor: over the broker-wide rate too, in its own queue
    assert other.events == ["hold"]
    deadline = asyncio.get_running_loop().time() + 5
    while arrivals[3].events[-1] != "admitted" and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    assert arrivals[2].events == ["hold", "admitted"] and arrivals[3].events == ["hold", "admitted"]
    assert other.events == ["hold", "admitted"]
    broker_rate, listeners = quotas.observed()  # Kafka's connection-accept-rate and -throttle-time
    assert broker_rate > 2 and listeners["PLAINTEXT"][0] > 2 and listeners["PLAINTEXT"][1] > 0
    assert listeners["PLAINTEXT"][2] == 0  # no IP quota


class _Slice:
    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd, self.position, self.size = fd, position, size


def _self_signed(directory: str) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    cert_path, key_path = os.path.join(directory, "c.pem"), os.path.join(directory, "k.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path


def test_large_file_answers_under_tls_leave_encrypted() -> None:
    """A 1 MB file slice sent through the writer a TLS transport gets: the bytes on the wire are not
    the file's (encrypted), and the TLS peer reads them back exactly."""
    payload = os.urandom(16) + b"PLAINTEXT-MARKER" * 65536  # 1 MB with a recognisable pattern

    async def run(directory: str) -> tuple[bytes, bytes, Any, Any]:
        cert, key = _self_signed(directory)
        server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_ctx.load_cert_chain(cert, key)
        client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        client_ctx.load_verify_locations(cert)
        data_path = os.path.join(directory, "segment")
        with open(data_path, "wb") as f:
            f.write(payload)
        fd = os.open(data_path, os.O_RDONLY)
        # A tapping proxy between client and server records the raw bytes on the wire.
        wire = bytearray()
        writers: list[Any] = []

        async def on_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            transport = writer.transport
            assert isinstance(transport, asyncio.Transport)
            chosen = writer_for(transport)
            writers.append(chosen)
            rest = chosen.send([b"head", _Slice(fd, 0, len(payload))])
            if rest:
                await chosen.send_rest(rest)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(on_server, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]

        async def tap(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", port)

            async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, record: bool) -> None:
                while data := await src.read(65536):
                    if record:
                        wire.extend(data)
                    dst.write(data)
                    await dst.drain()
                dst.close()

            await asyncio.gather(pipe(reader, up_w, False), pipe(up_r, writer, True))

        proxy = await asyncio.start_server(tap, "127.0.0.1", 0)
        proxy_port = proxy.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port, ssl=client_ctx,
                                                       server_hostname="localhost")
        received = await reader.read(-1)
        writer.close()
        server.close()
        proxy.close()
        os.close(fd)
        return received, bytes(wire), writers[0], None

    with tempfile.TemporaryDirectory() as directory:
        received, wire, chosen, _ = asyncio.run(run(directory))
    assert isinstance(chosen, CopyWriter) and not isinstance(chosen, ZeroCopyWriter)
    assert received == b"head" + payload
    assert len(wire) > len(payload)
    assert b"PLAINTEXT-MARKER" not in wire


def test_a_small_partial_frame_is_set_aside_and_completed_later() -> None:
    pool = BufferPool()
    reader = FrameReader(1 << 20, pool, MemoryPool(-1))
    wire = _frame(b"z" * 5000)
    _feed(reader, wire[:1028])
    assert reader.next_frame() is None
    reader.settle()
    assert reader._buf is None and reader.pending == 1028  # 1 KB held, not a 64 KB buffer
    _feed(reader, wire[1028:])
    frame = reader.next_frame()
    assert frame is not None and bytes(frame) == b"z" * 5000
