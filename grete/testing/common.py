"""What the in-process and the subprocess test brokers share: defaults, scratch space, errors."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

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
    """A port free on 127.0.0.1 now, for a process that binds it a moment later. It is drawn from
    below the kernel's ephemeral range: a port the kernel hands out (``bind(0)``) is one it may give
    the next outgoing connection (a client's, ZooKeeper's) in the moment before the listener binds,
    which then fails with "address already in use"."""
    low, _ = _ephemeral_range()
    if low - _LOWEST_CHOSEN < 1000:
        return _kernel_port()
    for _ in range(200):
        port = _RANDOM.randrange(_LOWEST_CHOSEN, low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    return _kernel_port()


# Random per process, not per seed: two test workers must not walk the same sequence of ports.
_RANDOM = random.SystemRandom()
_LOWEST_CHOSEN = 10000
_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _kernel_port() -> int:
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
            _HANDED_OUT.update(range(first, first + count))
            return first
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError(f"no {count} consecutive free ports")
