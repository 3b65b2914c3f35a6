"""TLS with the record crypto off the event loop (grete.broker.network.tls_offload): megabytes each way
byte for byte, file slices read and encrypted on the crypto threads, a client that leaves
mid-transfer, the kernel TLS detection, and large Produce and Fetch through a broker's SSL listener."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from grete.broker.network import tls_offload, tls_records
from grete.broker.network.tls_offload import (
    CRYPTO_THREADS,
    OFFLOAD_MIN_BYTES,
    TlsProtocol,
    TlsTransport,
    ktls_unavailable,
)
from grete.broker.replica.writers import FileRange
from grete.testing import broker
from tests.broker._tls import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-offload"))


class Answerer(asyncio.BufferedProtocol):
    """Takes ``expect`` bytes, then answers with ``answer`` (bytes and file slices); notes its end."""

    def __init__(self, expect: int, answer: list[Any], echo: int = 0) -> None:
        self.echo = echo  # the first ``echo`` bytes are sent back as they come
        self.expect = echo + expect
        self.answer = answer
        self.received = bytearray()
        self._buf = bytearray(100_000)
        self.transport: TlsTransport | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, TlsTransport)
        self.transport = transport
        if not self.expect:
            transport.write_parts(self.answer)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buf)

    def buffer_updated(self, nbytes: int) -> None:
        before = len(self.received)
        self.received += self._buf[:nbytes]
        assert self.transport is not None
        if before < self.echo:
            self.transport.write(bytes(self.received[before:self.echo]))
        if len(self.received) == self.expect:
            self.transport.write_parts(self.answer)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)


Client = Callable[[int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def serve(certs: Certs, make_app: Callable[[], Answerer],
          body: Callable[[Client, list[TlsProtocol], list[Answerer]], Awaitable[None]]) -> None:
    """Run ``body`` against a TLS server of TlsProtocols over ``make_app`` answerers."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(certs.server)
    client_context = ssl.create_default_context(cafile=str(certs.ca))

    async def main() -> None:
        layers: list[TlsProtocol] = []
        apps: list[Answerer] = []

        def app() -> Answerer:
            apps.append(make_app())
            return apps[-1]

        def layer() -> TlsProtocol:
            layers.append(TlsProtocol(server_context, app))
            return layers[-1]

        server = await asyncio.get_running_loop().create_server(layer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]

        async def connect(limit: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await asyncio.open_connection("127.0.0.1", port, ssl=client_context,
                                                 server_hostname="localhost", limit=limit)
        try:
            await body(connect, layers, apps)
        finally:
            server.close()
            await server.wait_closed()
    asyncio.run(main())


def test_megabytes_each_way_byte_for_byte(certs: Certs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """6 MB up, and an answer of bytes and file slices (slices larger than one job, cut across
    jobs) down: both arrive exactly, the large answer was read and encrypted on the crypto threads,
    small writes stayed on the loop, and the request was decrypted on the loop, many records per call
    with the C record reader."""
    segment = tmp_path / "segment"
    content = os.urandom(5_000_000)
    segment.write_bytes(content)
    request = os.urandom(6_000_000)
    threads: list[tuple[str, int]] = []
    encrypt = tls_offload._encrypt

    name, read_into = tls_records.select()
    reads: list[tuple[str, int]] = []

    def spy(sslobj: ssl.SSLObject, outgoing: ssl.MemoryBIO, work: Any) -> Any:
        threads.append((threading.current_thread().name, work.size))
        return encrypt(sslobj, outgoing, work)

    def read_spy(sslobj: ssl.SSLObject, buf: memoryview) -> tuple[int, int]:
        n, state = read_into(sslobj, buf)
        reads.append((threading.current_thread().name, n))
        return n, state
    monkeypatch.setattr(tls_offload, "_encrypt", spy)
    monkeypatch.setattr(tls_records, "select", lambda: (name, read_spy))

    fd = os.open(segment, os.O_RDONLY)
    try:
        answer: list[Any] = [b"head", FileRange(fd, 0, 3_000_000), b"middle" * 1000,
                             FileRange(fd, 3_000_000, 2_000_000), b"tail"]
        expected = b"head" + content[:3_000_000] + b"middle" * 1000 + content[3_000_000:] + b"tail"

        async def body(connect: Client, layers: list[TlsProtocol], apps: list[Answerer]) -> None:
            reader, writer = await connect(1 << 16)
            writer.write(b"small")  # answered on the loop
            await reader.readexactly(len(b"small"))
            writer.write(request)
            got = await reader.readexactly(len(expected))
            assert got == expected
            assert bytes(apps[0].received) == b"small" + request
            writer.close()
            await apps[0].lost
        serve(certs, lambda: Answerer(len(request), answer, echo=len(b"small")), body)
    finally:
        os.close(fd)
    big = {name for name, size in threads if size >= OFFLOAD_MIN_BYTES}
    small = {name for name, size in threads if size < OFFLOAD_MIN_BYTES}
    assert big and all(name.startswith("grete-tls") for name in big)
    assert small == {threading.current_thread().name}  # asyncio.run's loop runs on the test's thread
    assert {thread for thread, _ in reads} == {threading.current_thread().name}
    if name == "c":
        assert max(n for _, n in reads) > 16384  # many records per call


def test_client_gone_mid_transfer_leaves_nothing_behind(certs: Certs, tmp_path: Path) -> None:
    """Clients that read 1 MB of a 64 MB answer and go: each connection ends, holds no bytes, its
    job in flight finishes, and the crypto threads stay the pool's few."""
    segment = tmp_path / "segment"
    segment.write_bytes(os.urandom(4_000_000))
    fd = os.open(segment, os.O_RDONLY)
    try:
        answer = [FileRange(fd, 0, 4_000_000)] * 16

        async def body(connect: Client, layers: list[TlsProtocol], apps: list[Answerer]) -> None:
            for _ in range(4):
                reader, writer = await connect(1 << 16)
                await reader.readexactly(1 << 20)
                writer.transport.abort()
            await asyncio.gather(*(app.lost for app in apps))
            assert len(layers) == 4
            for layer in layers:
                assert layer.closed and layer.buffered() == 0
                if layer.job is not None:
                    await asyncio.wrap_future(layer.job)
            workers = [t for t in threading.enumerate() if t.name.startswith("grete-tls")]
            assert 0 < len(workers) <= CRYPTO_THREADS
        serve(certs, lambda: Answerer(0, answer), body)
    finally:
        os.close(fd)


def test_ktls_detection_falls_back_when_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    """kTLS needs ssl.OP_ENABLE_KTLS (Python 3.12+, OpenSSL 3) and the kernel's tls module; the
    reason it cannot be used is named, and the user-space path serves either way."""
    monkeypatch.delattr(ssl, "OP_ENABLE_KTLS", raising=False)
    assert "OP_ENABLE_KTLS" in (ktls_unavailable() or "")
    monkeypatch.setattr(ssl, "OP_ENABLE_KTLS", 8, raising=False)
    exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: False if p == "/proc/net/tls_stat" else exists(p))
    assert "tls module" in (ktls_unavailable() or "")
    monkeypatch.setattr(os.path, "exists", lambda p: True if p == "/proc/net/tls_stat" else exists(p))
    assert ktls_unavailable() is None


def test_listener_names_why_kernel_tls_is_not_used(certs: Certs, caplog: pytest.LogCaptureFixture) -> None:
    overrides = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(certs.server)}
    with caplog.at_level(logging.INFO, logger="grete.broker.network.tls"), broker(overrides):
        pass
    lines = [r.getMessage() for r in caplog.records if "kernel TLS not used" in r.getMessage()]
    assert lines == [f"listener SSL: TLS records encrypted by OpenSSL off the event loop, read by the "
                     f"{tls_records.select()[0]} record reader; kernel TLS not used: "
                     f"{ktls_unavailable() or 'grete has no kTLS transport'}"]


def test_several_megabytes_produced_and_fetched_over_tls(certs: Certs) -> None:
    """A 6 MB record produced and fetched through an SSL listener arrives byte for byte, both
    ways over grete's TLS transport."""
    overrides = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(certs.server), "message.max.bytes": "8000000",
                 "socket.request.max.bytes": "20000000"}
    value = os.urandom(6_000_000)
    with broker(overrides, topics={"big": 1}) as b:
        conf = {"bootstrap.servers": b.bootstrap_servers, "security.protocol": "SSL",
                "ssl.ca.location": str(certs.ca)}
        producer = Producer({**conf, "message.max.bytes": 8_000_000})
        producer.produce("big", value=value, partition=0)
        assert producer.flush(30) == 0
        consumer = Consumer({**conf, "group.id": "big", "fetch.max.bytes": 20_000_000,
                             "max.partition.fetch.bytes": 20_000_000, "receive.message.max.bytes": 30_000_000})
        consumer.assign([TopicPartition("big", 0, 0)])
        try:
            deadline = time.monotonic() + 30
            message = None
            while message is None and time.monotonic() < deadline:
                message = consumer.poll(1)
            assert message is not None and message.error() is None
            assert message.value() == value
            transports = b.call(lambda: [type(c.transport) for c in b.broker.connections])
            assert transports and set(transports) == {TlsTransport}
        finally:
            consumer.close()


class Echo(Answerer):
    """Sends back each piece as it comes: a large request makes large answers while more of it
    is still arriving."""

    def buffer_updated(self, nbytes: int) -> None:
        self.received += self._buf[:nbytes]
        assert self.transport is not None
        self.transport.write(bytes(self._buf[:nbytes]))


def test_one_job_at_a_time_per_connection(certs: Certs, monkeypatch: pytest.MonkeyPatch) -> None:
    """8 MB echoed as it arrives: the answers are encrypted on the crypto threads while more keeps
    arriving, yet a connection's SSLObject is never used by two threads at once (nor read on the
    loop while a job holds it), and the echo comes back exactly."""
    active: dict[int, int] = {}
    overlaps: list[int] = []
    workers: set[str] = set()
    lock = threading.Lock()

    def exclusive(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(sslobj: ssl.SSLObject, *args: Any) -> Any:
            with lock:
                active[id(sslobj)] = active.get(id(sslobj), 0) + 1
                overlaps.append(active[id(sslobj)])
                workers.add(threading.current_thread().name)
            try:
                return fn(sslobj, *args)
            finally:
                with lock:
                    active[id(sslobj)] -= 1
        return run
    monkeypatch.setattr(tls_offload, "_encrypt", exclusive(tls_offload._encrypt))
    name, read_into = tls_records.select()

    monkeypatch.setattr(tls_records, "select", lambda: (name, exclusive(read_into)))
    request = os.urandom(8_000_000)

    async def body(connect: Client, layers: list[TlsProtocol], apps: list[Answerer]) -> None:
        reader, writer = await connect(1 << 16)
        writer.write(request)
        assert await reader.readexactly(len(request)) == request
        writer.close()
        await apps[0].lost
    serve(certs, lambda: Echo(0, []), body)
    assert any(name.startswith("grete-tls") for name in workers)
    assert overlaps and max(overlaps) == 1


class Pausing(Answerer):
    """Pauses its reading for a moment after every 200 KB received, with a small receive buffer;
    notes the peer's close_notify (eof_received) and how much had arrived by then."""

    def __init__(self) -> None:
        super().__init__(-1, [])
        self._buf = bytearray(30_000)
        self.eof_at: int | None = None

    def buffer_updated(self, nbytes: int) -> None:
        before = len(self.received)
        self.received += self._buf[:nbytes]
        assert self.transport is not None
        if before // 200_000 != len(self.received) // 200_000:
            self.transport.pause_reading()
            asyncio.get_running_loop().call_later(0.01, self.transport.resume_reading)

    def eof_received(self) -> bool | None:
        self.eof_at = len(self.received)
        return None


def test_a_paused_app_gets_every_byte_then_the_close(certs: Certs) -> None:
    """4 MB sent in one go and closed with close_notify, to an app that pauses its reading every
    200 KB and takes 30 KB per buffer: what the BIO holds waits for it, every byte arrives in
    order, and the close comes after the last byte."""
    request = os.urandom(4_000_000)

    async def body(connect: Client, layers: list[TlsProtocol], apps: list[Answerer]) -> None:
        reader, writer = await connect(1 << 16)
        writer.write(request)
        await writer.drain()
        writer.close()  # close_notify right behind the data
        while not apps:  # the server's side of the handshake ends after the client's
            await asyncio.sleep(0.01)
        await apps[0].lost
    apps: list[Pausing] = []

    def make() -> Pausing:
        apps.append(Pausing())
        return apps[-1]
    serve(certs, make, body)
    assert bytes(apps[0].received) == request
    assert apps[0].eof_at == len(request)
