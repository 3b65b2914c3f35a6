"""Closing a broker's listener port while its process lives, with iptables (root): new TCP
connections to the port get a reset (refused), so does every packet of the open ones, both ways,
and the open ones are reset at once (``ss -K``: an idle connection sends no packet to reset). The
process keeps running, keeps its ZooKeeper session (it reaches ZooKeeper from an ephemeral port,
through its proxy) and keeps its own outgoing connections to the other brokers.

The rules live in a chain of their own, ``grete-jepsen-<pid>``, reached from INPUT and OUTPUT by
jumps commented ``grete-jepsen``: ``open_port`` removes the jumps and the chain, and a run that
died before doing so is cleaned up by ``python -m tests.jepsen.firewall --clean`` (chains of
processes that no longer exist). With ``--netns`` the rules go into the broker's own namespace
(``prefix`` runs iptables there), which disappears with the run anyway.

    wall = Firewall(prefix=[])
    wall.close_port("127.0.0.1", 9092); ...; wall.open_port()
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence

COMMENT = "grete-jepsen"
HOOKS = ("INPUT", "OUTPUT")
_CHAIN = re.compile(rf"^-N ({COMMENT}-(\d+))$", re.MULTILINE)


def available() -> str | None:
    """None when ports can be closed here, else why not."""
    if os.geteuid() != 0:
        return "closing a port with iptables needs root"
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables; ./scripts/install-test-deps does it)"
    return None


def _iptables(prefix: Sequence[str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = [*prefix, "iptables", "-w", "10", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done


class Firewall:
    """One closed port at a time, in the namespace ``prefix`` runs commands in (none: this one)."""

    def __init__(self, prefix: Sequence[str] = ()) -> None:
        self.prefix = list(prefix)
        self.chain = f"{COMMENT}-{os.getpid()}"
        self.port: int | None = None

    def close_port(self, host: str, port: int) -> None:
        """Refuse new TCP connections to ``host:port`` and reset the open ones."""
        self.open_port()
        self.port = port
        _iptables(self.prefix, "-N", self.chain)
        for match in ("--dport", "--sport"):
            # Not the resets themselves: the one REJECT answers with leaves from the port too.
            _iptables(self.prefix, "-A", self.chain, "-p", "tcp", match, str(port), "!", "--tcp-flags", "RST", "RST",
                      "-j", "REJECT", "--reject-with", "tcp-reset")
        for hook in HOOKS:
            _iptables(self.prefix, "-I", hook, "-m", "comment", "--comment", COMMENT, "-j", self.chain)
        # The rules reset a connection at its next packet; an idle one (a liveness watch waiting
        # for its end) sends none, so destroy those sockets too (the kernel resets the peer).
        command = [*self.prefix, "ss", "-K", "-t", "state", "established", f"( sport = :{port} )", "src", host]
        subprocess.run(command, capture_output=True, timeout=30, check=True)

    def open_port(self) -> None:
        """Remove the jumps and the chain (whatever of them exists)."""
        remove_chain(self.prefix, self.chain)
        self.port = None


def remove_chain(prefix: Sequence[str], chain: str) -> None:
    for hook in HOOKS:
        while _iptables(prefix, "-D", hook, "-m", "comment", "--comment", COMMENT, "-j", chain,
                        check=False).returncode == 0:
            pass
    _iptables(prefix, "-F", chain, check=False)
    _iptables(prefix, "-X", chain, check=False)


def clean(prefix: Sequence[str] = ()) -> list[str]:
    """Remove the chains of runs whose process is gone; returns their names."""
    listing = _iptables(prefix, "-S").stdout
    removed = []
    for chain, pid in _CHAIN.findall(listing):
        if not os.path.exists(f"/proc/{pid}"):
            remove_chain(prefix, chain)
            removed.append(chain)
    return removed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="iptables chains left by tests/jepsen")
    parser.add_argument("--clean", action="store_true", help="remove the chains of runs that no longer exist")
    args = parser.parse_args(argv)
    missing = available()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    if args.clean:
        print("\n".join(f"removed {c}" for c in clean()) or "nothing to remove")
    else:
        print(_iptables([], "-S").stdout, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
