"""``grete host``: several brokers on this host, one per core by default, as one service.

The brokers' properties come from :mod:`grete.broker.host_layout`; each is written to
``<dir>/broker-<id>.properties`` and run as ``grete serve`` with its output in
``<dir>/broker-<id>.log``. On a KRaft cluster, log dirs not formatted yet are formatted with
``--cluster-id`` (as ``kafka-storage format --ignore-formatted``). Ctrl-C or SIGTERM stops every
broker with a controlled shutdown (SIGTERM, which ``grete serve`` takes as Kafka's controlled
shutdown), in parallel, and waits for them. A broker that ends on its own is reported at once with
the last lines of its log; the others go on serving, and the service ends when none is left.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from grete.broker import storage_tool
from grete.broker.child_process import describe_exit, exited, spawn, tail
from grete.broker.config import read_properties
from grete.broker.host_layout import HostFacts, broker_count, lay_out

STOP_TIMEOUT_S = 120.0  # a controlled shutdown moves leaderships away first


class HostError(RuntimeError):
    """The brokers cannot be started (the message says why)."""


def properties_of(path: str, overrides: list[str]) -> dict[str, str]:
    items = read_properties(Path(path))
    for override in overrides:
        key, sep, value = override.partition("=")
        if not sep:
            raise HostError(f"--override takes KEY=VALUE, not {override!r}")
        items[key.strip()] = value.strip()
    return items


def write_layout(directory: Path, layouts: list[dict[str, str]], cluster_id: str | None) -> list[Path]:
    """Each broker's properties file, its log dirs formatted first on a KRaft cluster."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for items in layouts:
        path = directory / f"broker-{_node_id(items)}.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in items.items()))
        if "process.roles" in items:
            _format(path, items, cluster_id)
        written.append(path)
    return written


def _node_id(items: dict[str, str]) -> str:
    return items.get("node.id") or items["broker.id"]


def _format(path: Path, items: dict[str, str], cluster_id: str | None) -> None:
    dirs = [d for d in items["log.dirs"].split(",") if d]
    unformatted = [d for d in dirs if not (Path(d) / "meta.properties").exists()]
    if not unformatted:
        return
    if cluster_id is None:
        raise HostError(f"broker {_node_id(items)}'s log dirs are not formatted ({', '.join(unformatted)}): "
                        "give the cluster's id with --cluster-id (kafka-cluster cluster-id tells it)")
    failed = storage_tool.format_ignoring_formatted(path, cluster_id)
    if failed is not None:
        raise HostError(f"formatting broker {_node_id(items)}'s log dirs failed: {failed}")


class HostBrokers:
    """The running brokers, watched until they are stopped or all have ended."""

    def __init__(self, directory: Path, properties: list[Path]) -> None:
        self.directory = directory
        self.properties = properties
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.stopping = False

    def start(self) -> None:
        for path in self.properties:
            broker_id = path.stem.removeprefix("broker-")
            command = [sys.executable, "-m", "grete.cli", "serve", str(path)]
            self.processes[broker_id] = spawn(command, self.directory / f"broker-{broker_id}.log")

    async def run(self) -> int:
        """Until a signal stops the brokers (0) or every broker has ended on its own (1)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stop)
        try:
            ends = [self._watch(broker_id, process) for broker_id, process in self.processes.items()]
            await asyncio.gather(*ends)
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        return 0 if self.stopping else 1

    def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        print(f"stopping {len(self.processes)} brokers (controlled shutdown)...", flush=True)
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        asyncio.get_running_loop().call_later(STOP_TIMEOUT_S, self._kill_stragglers)

    def _kill_stragglers(self) -> None:
        for broker_id, process in self.processes.items():
            if process.poll() is None:
                print(f"broker {broker_id} did not stop within {STOP_TIMEOUT_S:.0f} s: killed", flush=True)
                process.kill()

    async def _watch(self, broker_id: str, process: subprocess.Popen[bytes]) -> None:
        code = await exited(process)
        if self.stopping:
            return
        log_path = self.directory / f"broker-{broker_id}.log"
        lines = [f"grete host: broker {broker_id} (pid {process.pid}) ended: {describe_exit(code)}; "
                 f"last lines of {log_path}:"]
        lines += [f"    {line}" for line in tail(log_path)]
        print("\n".join(lines), file=sys.stderr, flush=True)


def plan(args: argparse.Namespace, facts: HostFacts) -> list[dict[str, str]]:
    """The layout ``grete host`` runs, from its command line (raises HostError, HostLayoutError)."""
    items = properties_of(args.properties, args.override)
    return lay_out(items, broker_count(args.brokers, facts), facts, args.port_stride)


def host_facts() -> HostFacts:
    """This host's name, the cores this process may run on, and its memory."""
    cores = len(os.sched_getaffinity(0))
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return HostFacts(socket.gethostname(), cores, memory)
