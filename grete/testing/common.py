"""What the in-process and the subprocess test brokers share: defaults, scratch space, errors."""

from __future__ import annotations

import os
import socket

# A test broker differs from ``grete serve``'s embedded defaults in one respect: one partition for
# __consumer_offsets and for __transaction_state instead of 50, so a test's first consumer group or
# transactional producer does not pay for creating (and fsyncing) 50 logs. Overrides win.
TEST_DEFAULTS = {
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.num.partitions": "1",
}


def scratch_root() -> str | None:
    """Where test brokers keep their data: ``$GRETE_TEST_TMPDIR``, else /dev/shm when it is a
    writable tmpfs (a throwaway log's fsyncs then cost nothing: start+stop drops from ~10 ms to
    ~2 ms, and does not stall behind other disk I/O), else the system temp dir."""
    configured = os.environ.get("GRETE_TEST_TMPDIR")
    if configured:
        return configured
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return None


class BrokerStartError(RuntimeError):
    """The broker did not come up (port in use, unusable data dir, ...); the cause is chained."""


def free_port() -> int:
    """A port free on 127.0.0.1 now (for a process that binds it a moment later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports free on 127.0.0.1 now (``grete host`` gives its
    brokers consecutive ports)."""
    for _ in range(200):
        first = free_port()
        if first + count > 65535:
            continue
        held: list[socket.socket] = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports")
