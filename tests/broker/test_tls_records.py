"""The TLS record reader (grete.broker.network.tls_records): the C reader decrypts every whole record
a connection's BIO holds in one call, byte for byte what Python's ssl reads a record at a time, stops
at a partial record, a full buffer and the peer's close_notify, and fails a tampered record with
ssl.SSLError, leaving nothing in OpenSSL's error queue for the next connection."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest

from grete.broker.network import tls_records
from grete.broker.network.tls_records import CLOSED, FULL, WANT_READ, python_read_into
from tests.broker._tls import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("tls-records"))


@pytest.fixture(scope="module")
def c_reader() -> tls_records.Reader:
    name, reader = tls_records.select()
    assert name == "c", "the C record reader did not build (see the warning logged)"
    return reader


class Pair:
    """A TLS 1.3 client and server over memory BIOs, handshaken."""

    def __init__(self, certs: Certs, version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_3) -> None:
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server_context.load_cert_chain(certs.server)
        server_context.maximum_version = version
        client_context = ssl.create_default_context(cafile=str(certs.ca))
        client_context.check_hostname = False
        self.server_in, self.server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.client_in, self.client_out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.server = server_context.wrap_bio(self.server_in, self.server_out, server_side=True)
        self.client = client_context.wrap_bio(self.client_in, self.client_out)
        for _ in range(4):
            for side in (self.client, self.server):
                try:
                    side.do_handshake()
                except ssl.SSLWantReadError:
                    pass
            self.server_in.write(self.client_out.read())
            self.client_in.write(self.server_out.read())
        assert self.server.version() == ("TLSv1.3" if version == ssl.TLSVersion.TLSv1_3 else "TLSv1.2")

    def send(self, data: bytes, record: int) -> bytes:
        """``data`` from the client as records of ``record`` bytes; the ciphertext."""
        for i in range(0, len(data), record):
            self.client.write(data[i:i + record])
        return self.client_out.read()


def read_all(reader: tls_records.Reader, sslobj: ssl.SSLObject, size: int) -> tuple[bytes, list[int]]:
    out = bytearray()
    states = []
    buf = memoryview(bytearray(size))
    while True:
        n, state = reader(sslobj, buf)
        out += buf[:n]
        states.append(state)
        if state != FULL:
            return bytes(out), states


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_many_records_in_one_call_as_python_reads_them(certs: Certs, c_reader: tls_records.Reader,
                                                       version: ssl.TLSVersion) -> None:
    data = os.urandom(1 << 20)
    pairs = [Pair(certs, version), Pair(certs, version)]
    for pair, reader in zip(pairs, (c_reader, python_read_into), strict=True):
        pair.server_in.write(pair.send(data, 1800))
        got, states = read_all(reader, pair.server, 1 << 20)
        assert got == data
        assert states == [FULL, WANT_READ]  # a megabyte's buffer filled in one call, then nothing left


def test_a_partial_record_waits_for_its_rest(certs: Certs, c_reader: tls_records.Reader) -> None:
    pair = Pair(certs)
    cipher = pair.send(b"a" * 3000 + b"b" * 3000, 3000)
    pair.server_in.write(cipher[:-10])
    buf = memoryview(bytearray(10_000))
    assert c_reader(pair.server, buf) == (3000, WANT_READ)
    assert bytes(buf[:3000]) == b"a" * 3000
    pair.server_in.write(cipher[-10:])
    assert c_reader(pair.server, buf) == (3000, WANT_READ)
    assert bytes(buf[:3000]) == b"b" * 3000


def test_a_full_buffer_keeps_the_rest_for_the_next_call(certs: Certs, c_reader: tls_records.Reader) -> None:
    pair = Pair(certs)
    data = os.urandom(50_000)
    pair.server_in.write(pair.send(data, 1800))
    got, states = read_all(c_reader, pair.server, 7_000)
    assert got == data
    assert states[:-1] == [FULL] * (len(states) - 1) and states[-1] == WANT_READ


def test_close_notify_after_the_data(certs: Certs, c_reader: tls_records.Reader) -> None:
    pair = Pair(certs)
    cipher = pair.send(b"last words", 100)
    try:
        pair.client.unwrap()
    except ssl.SSLWantReadError:
        pass
    pair.server_in.write(cipher + pair.client_out.read())
    buf = memoryview(bytearray(1000))
    assert c_reader(pair.server, buf) == (10, CLOSED)
    assert bytes(buf[:10]) == b"last words"


def test_a_tampered_record_fails_and_leaves_no_error_behind(certs: Certs, c_reader: tls_records.Reader,
                                                            tmp_path: Path) -> None:
    pair = Pair(certs)
    cipher = bytearray(pair.send(b"x" * 1000 + b"y" * 1000, 1000))
    cipher[-20] ^= 0xFF  # in the second record's ciphertext: its tag no longer matches
    pair.server_in.write(bytes(cipher))
    buf = memoryview(bytearray(5000))
    with pytest.raises(ssl.SSLError, match="bad record mac|decryption failed"):
        c_reader(pair.server, buf)
    assert bytes(buf[:1000]) == b"x" * 1000  # the records before it were read
    # Python's ssl on this thread sees no stale error: another connection reads as before.
    other = Pair(certs)
    other.server_in.write(other.send(b"fine", 100))
    assert c_reader(other.server, buf) == (4, WANT_READ)
    other.server_in.write(other.send(b"also fine", 100))
    assert other.server.read(100) == b"also fine"


def test_python_is_the_fallback_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(tls_records.ENV, "python")
    assert tls_records.select() == ("python", python_read_into)


def test_refuses_what_is_not_an_sslobject(c_reader: tls_records.Reader) -> None:
    module = tls_records._native()
    assert not isinstance(module, Exception)
    with pytest.raises(TypeError, match="_ssl._SSLSocket"):
        module.read_into(object(), bytearray(10))
