"""firewall.py on a local listener: a closed port refuses new connections and resets the open ones,
idle ones included, and opening it removes every rule (root and iptables, else skipped)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator

import pytest

from tests.jepsen import firewall

pytestmark = pytest.mark.skipif(firewall.available() is not None, reason=str(firewall.available()))


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def rules() -> str:
    return subprocess.run(["iptables", "-S"], capture_output=True, text=True, check=True).stdout


def test_closed_port_refuses_and_resets_then_opens(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port), timeout=5)
    accepted, _ = listener.accept()
    wall = firewall.Firewall()
    try:
        wall.close_port("127.0.0.1", port)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5)
        with pytest.raises(ConnectionResetError):  # idle until now: reset without a packet of its own
            client.recv(1)
    finally:
        wall.open_port()
        client.close()
        accepted.close()
    assert wall.chain not in rules()
    socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_clean_removes_only_chains_of_dead_runs(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan, ours = firewall.Firewall(), firewall.Firewall()
    orphan.chain = f"{firewall.COMMENT}-{dead.pid}"
    try:
        orphan.close_port("127.0.0.1", port)
        ours.close_port("127.0.0.1", port + 1 if port < 65535 else port - 1)
        removed = firewall.clean()
        assert orphan.chain in removed and ours.chain not in removed
        assert orphan.chain not in rules() and ours.chain in rules()
    finally:
        orphan.open_port()
        ours.open_port()
