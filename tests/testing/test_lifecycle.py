"""Start, stop and misuse: no thread, socket, file or process left behind; mistakes fail fast."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer

from grete.broker.config import ConfigError
from grete.testing import BrokerStartError, broker


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def test_teardown_leaves_no_thread_socket_or_file(tmp_path: Path) -> None:
    with broker(topics={"t": 2}) as warm:  # first start imports the handlers: not a leak
        warm.faults.fail("Produce", times=1).remove()
    threads, fds = _threads(), _fds()
    with broker(topics={"t": 2}) as b:
        data_dir = b.data_dir
        with socket.create_connection((b.host, b.port)) as client:
            client.sendall(b"\x00\x00\x00")  # a half-written frame stays open across the stop
            with b.faults.delay("Metadata", 0.01):
                b.faults.pause_partition("t", 1)  # left paused on purpose: stop must not hang
                b.faults.drop_connections()
            time.sleep(0.05)
            assert threading.active_count() > len(threads)
    assert not data_dir.exists()
    assert _threads() == threads
    leaked = {fd: _target(fd) for fd in _fds() - fds}
    assert leaked == {}


def test_teardown_after_client_traffic_and_a_group(tmp_path: Path) -> None:
    with broker(topics={"t": 1}):
        pass
    threads, fds = _threads(), _fds()
    with broker(topics={"t": 1}) as b:
        producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)
        producer.send("t", b"x").get(timeout=10)
        producer.close()
        consumer = KafkaConsumer("t", bootstrap_servers=b.bootstrap_servers, group_id="g",
                                 auto_offset_reset="earliest", consumer_timeout_ms=3000)
        assert next(iter(consumer)).value == b"x"
        consumer.close()
    assert _threads() == threads
    assert {fd: _target(fd) for fd in _fds() - fds} == {}


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"


def test_unknown_override_names_the_key() -> None:
    started = time.monotonic()
    with pytest.raises(ConfigError, match="num.partitons"):
        with broker({"num.partitons": "3"}):
            pass
    assert time.monotonic() - started < 1


def test_port_in_use_fails_fast_with_the_reason() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        threads, fds = _threads(), _fds()
        started = time.monotonic()
        with pytest.raises(BrokerStartError, match=f"127.0.0.1:{port}.*address already in use"):
            with broker({"listeners": f"PLAINTEXT://127.0.0.1:{port}"}):
                pass
        assert time.monotonic() - started < 5
        assert _threads() == threads
        assert {fd: _target(fd) for fd in _fds() - fds} == {}


def test_fixture_surfaces_a_bad_override_as_a_setup_error(tmp_path: Path) -> None:
    """Through the pytest plugin: a typo in @grete_overrides is a setup error naming the key."""
    test_file = tmp_path / "test_typo.py"
    test_file.write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.grete_overrides(**{"auto.create.topics.enabel": "false"})
        def test_it(grete_broker):
            pass
    """))
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 error" in result.stdout
    assert "Unknown configuration 'auto.create.topics.enabel'" in result.stdout


def test_subprocess_mode_serves_clients_and_leaves_nothing(tmp_path: Path) -> None:
    with broker({"num.partitions": "2"}, subprocess=True, topics={"t": 3}) as child:
        pid = child.pid
        scratch = child.log_path.parent
        producer = KafkaProducer(bootstrap_servers=child.bootstrap_servers)
        metadata = producer.send("t", b"isolated", partition=2).get(timeout=10)
        producer.close()
        assert (metadata.partition, metadata.offset) == (2, 0)
        assert child.process.poll() is None
        assert child.stop() == 0  # SIGTERM is a clean shutdown ...
        assert "stopped cleanly" in child.log()  # ... that closed the logs properly
    assert not scratch.exists()
    assert not Path(f"/proc/{pid}").exists()


def test_subprocess_mode_fails_fast() -> None:
    with pytest.raises(ConfigError, match="log.retention.hourz"):
        with broker({"log.retention.hourz": "1"}, subprocess=True):
            pass
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BrokerStartError, match="address already in use"):
            with broker({"listeners": f"PLAINTEXT://127.0.0.1:{port}"}, subprocess=True, start_timeout=20):
                pass
