"""Network partitions between brokers: each broker runs in its own network namespace, joined to the
root namespace by a veth pair, with the root namespace routing between them. Clients, ZooKeeper
and the ZooKeeper proxies stay in the root namespace, so cutting two brokers apart leaves both
reachable by clients and by ZooKeeper: only broker<->broker traffic is lost.

A cut is a pair of blackhole routes, one in each broker's namespace for the other's address:
packets are dropped silently, as on a real partition (open connections hang until their timeouts,
new ones time out), and deleting the routes heals it. Needs root and ``ip`` (iproute2).

    net = Network()
    net.add(1); net.add(2)
    subprocess.Popen(net.prefix(1) + [...])     # a broker listening on net.address(1)
    net.cut(1, 2); ...; net.heal()
    net.close()
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

FORWARDING = Path("/proc/sys/net/ipv4/ip_forward")


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    return None


def _ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done


class Network:
    """Namespaces ``<tag>b<id>``; broker ``id`` at 10.<net>.<id>.2, its root side at 10.<net>.<id>.1."""

    def __init__(self, tag: str | None = None) -> None:
        pid = os.getpid()
        self.tag = tag or f"gj{pid % 10000}"
        self.net = 100 + pid % 100  # second octet: two runs at once use different subnets
        self.members: list[int] = []
        self.cuts: set[tuple[int, int]] = set()
        self._forwarding = FORWARDING.read_text().strip()
        FORWARDING.write_text("1\n")

    def namespace(self, broker_id: int) -> str:
        return f"{self.tag}b{broker_id}"

    def address(self, broker_id: int) -> str:
        return f"10.{self.net}.{broker_id}.2"

    def root_address(self, broker_id: int) -> str:
        return f"10.{self.net}.{broker_id}.1"

    def prefix(self, broker_id: int) -> list[str]:
        """Run a command inside the broker's namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.namespace(broker_id)]

    def add(self, broker_id: int) -> None:
        ns, root_if, ns_if = self.namespace(broker_id), f"{self.tag}r{broker_id}", f"{self.tag}n{broker_id}"
        _ip("netns", "add", ns)
        _ip("link", "add", root_if, "type", "veth", "peer", "name", ns_if)
        _ip("link", "set", ns_if, "netns", ns)
        _ip("addr", "add", f"{self.root_address(broker_id)}/24", "dev", root_if)
        _ip("link", "set", root_if, "up")
        _ip("addr", "add", f"{self.address(broker_id)}/24", "dev", ns_if, namespace=ns)
        _ip("link", "set", ns_if, "up", namespace=ns)
        _ip("link", "set", "lo", "up", namespace=ns)
        _ip("route", "add", "default", "via", self.root_address(broker_id), namespace=ns)
        self.members.append(broker_id)

    def cut(self, a: int, b: int) -> None:
        """Drop everything between brokers ``a`` and ``b``, both ways."""
        pair = (min(a, b), max(a, b))
        if pair in self.cuts:
            return
        _ip("route", "add", "blackhole", f"{self.address(b)}/32", namespace=self.namespace(a))
        _ip("route", "add", "blackhole", f"{self.address(a)}/32", namespace=self.namespace(b))
        self.cuts.add(pair)

    def isolate(self, broker_id: int) -> None:
        """Cut ``broker_id`` from every other broker (clients and ZooKeeper still reach it)."""
        for other in self.members:
            if other != broker_id:
                self.cut(broker_id, other)

    def heal(self) -> None:
        for a, b in sorted(self.cuts):
            _ip("route", "del", "blackhole", f"{self.address(b)}/32", namespace=self.namespace(a), check=False)
            _ip("route", "del", "blackhole", f"{self.address(a)}/32", namespace=self.namespace(b), check=False)
        self.cuts.clear()

    def close(self) -> None:
        for broker_id in self.members:
            _ip("link", "del", f"{self.tag}r{broker_id}", check=False)  # takes its peer with it
            _ip("netns", "del", self.namespace(broker_id), check=False)
        self.members.clear()
        FORWARDING.write_text(self._forwarding + "\n")


HOSTS = Path("/etc/hosts")


def own_hosts(path: Path, names: dict[str, str]) -> list[str]:
    """The prefix that runs a command with its own ``/etc/hosts`` (this host's, plus ``names``: name ->
    address), bind-mounted in a mount namespace of its own (root; ``unshare`` and ``sh`` exec the
    command: same pid). A KRaft node learns the quorum leader's advertised endpoint from the answers
    it gets (KIP-853) and connects there instead of to the address it was configured with: the
    controllers advertise names, and each broker resolves them to its own proxies."""
    path.write_text(HOSTS.read_text() + "".join(f"{address} {name}\n" for name, address in names.items()))
    return ["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(path)]
