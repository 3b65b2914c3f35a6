"""``grete cluster`` watching its processes: a broker's death is reported the moment it happens (its
exit code or signal and the last lines of its log), and a control socket in the cluster's
directory (``<dir>/cluster.sock``) answers ``grete cluster status|restart N|stop [N]``.

Deaths are awaited on each child's pidfd from the event loop (what asyncio's pidfd child watcher
does), never polled. Every start and stop runs on one lifecycle thread: operations on the cluster
happen one at a time, and a broker started there gets its parent-death signal from that thread,
which lives until every process it started has been stopped.

The socket speaks one request line (``status``, ``restart <id>``, ``stop <id>``, ``stop``) and answers with
an exit code on the first line and the text to print after it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from grete.broker.child_process import describe_exit, exited, tail
from grete.coordinator.zookeeper import zk_layout as zk
from grete.protocol.messages import MetadataRequest, MetadataResponse
from grete.testing import _wire
from grete.testing.cluster import GreteCluster
from grete.testing.common import BrokerStartError
from grete.testing.process import BrokerProcess

SOCKET_NAME = "cluster.sock"
PROBE_TIMEOUT_S = 3.0
T = TypeVar("T")


class ControlError(RuntimeError):
    """No supervisor answers on the cluster's socket, or one already runs there."""


def socket_path(directory: Path) -> Path:
    path = directory.resolve() / SOCKET_NAME
    if len(os.fsencode(path)) >= 108:  # sun_path's size on Linux
        raise ControlError(f"{path} is too long for a Unix socket: use a shorter --dir")
    return path


def claim_socket(directory: Path) -> Path:
    """The control socket's path, a stale one (left by a killed supervisor) removed; refused
    when a supervisor still answers there."""
    path = socket_path(directory)
    try:
        request(directory, "status")
    except ControlError:
        path.unlink(missing_ok=True)
        return path
    raise ControlError(f"a grete cluster already runs in {directory} ({path} answers)")


def request(directory: Path, line: str) -> tuple[int, str]:
    """Send one request to the running ``grete cluster``; (exit code, text). Waits for the answer:
    a restart answers once the broker serves."""
    path = socket_path(directory)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(path))
        except OSError as exc:
            raise ControlError(f"no grete cluster runs in {directory} ({path}: {exc.strerror})") from None
        sock.sendall(line.encode() + b"\n")
        sock.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: sock.recv(65536), b"")).decode(errors="replace")
    code, _, text = answer.partition("\n")
    return (int(code) if code.isdigit() else 1), text


class ClusterSupervisor:
    def __init__(self, running: GreteCluster, lifecycle: ThreadPoolExecutor) -> None:
        self.running = running
        self.lifecycle = lifecycle
        # How a broker ended ("stopped", "killed by SIGKILL", ...) or what is being done to it.
        self.condition: dict[int, str] = {}
        self.closing = False
        self.done = asyncio.Event()
        # Set once every process has stopped and the socket is gone: ``stop`` answers then, so a
        # script's next ``grete cluster`` in the same directory finds the ports and the socket free.
        self.stopped = asyncio.Event()
        self._answering: set[asyncio.Task[None]] = set()
        zookeeper = running.zookeeper
        self._zk = KazooClient(hosts=zookeeper.connect) if zookeeper is not None else None
        self._watches: set[asyncio.Task[None]] = set()

    async def run(self, path: Path) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.shut_down)
        if self._zk is not None:
            await asyncio.to_thread(self._zk.start, 10)
            self._keep(self._watch_zookeeper())
        for broker_id, broker in self.running.brokers.items():
            self._keep(self._watch(broker_id, broker))
        for node_id, controller in self._controllers().items():
            self._keep(self._watch(node_id, controller, "controller"))
        server = await asyncio.start_unix_server(self._serve, str(path))
        try:
            await self.done.wait()
        finally:
            self.closing = True
            print("stopping...", flush=True)
            server.close()
            for watch in list(self._watches):
                watch.cancel()
            if self._zk is not None:
                await asyncio.to_thread(self._zk.stop)  # before ZooKeeper goes, or kazoo complains
                self._zk.close()
            await self._in_lifecycle(self.running.stop)
            path.unlink(missing_ok=True)
            self.stopped.set()
            if self._answering:  # the stop request's answer, written before the loop ends
                await asyncio.wait(list(self._answering), timeout=5)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def shut_down(self) -> None:
        """From now on, processes ending are the shutdown, not deaths to report."""
        self.closing = True
        self.done.set()

    def _keep(self, watch: Coroutine[None, None, None]) -> None:
        """A watch task, referenced until it ends (the loop keeps only weak references)."""
        task = asyncio.ensure_future(watch)
        self._watches.add(task)
        task.add_done_callback(self._watches.discard)

    async def _in_lifecycle(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.lifecycle, call)

    # --- deaths ------------------------------------------------------------------------------
    def _controllers(self) -> dict[int, BrokerProcess]:
        quorum = self.running.quorum
        return quorum.controllers if quorum is not None else {}

    def _process(self, node_id: int) -> BrokerProcess | None:
        return self.running.brokers.get(node_id) or self._controllers().get(node_id)

    async def _watch(self, broker_id: int, broker: BrokerProcess, kind: str = "broker") -> None:
        code = await exited(broker.process)
        if self.closing or broker_id in self.condition:
            return  # stopped on request: the request reports it
        self.condition[broker_id] = f"dead: {describe_exit(code)}"
        lines = [f"grete cluster: {kind} {broker_id} (pid {broker.pid}, port {broker.port}) died: "
                 f"{describe_exit(code)}; last lines of {broker.log_path}:"]
        lines += [f"    {line}" for line in tail(broker.log_path)]
        lines.append(f"restart it with: grete cluster restart {broker_id} --dir {self.running.directory}")
        print("\n".join(lines), file=sys.stderr, flush=True)

    async def _watch_zookeeper(self) -> None:
        zookeeper = self.running.zookeeper
        assert zookeeper is not None and zookeeper.process is not None
        code = await exited(zookeeper.process)
        if self.closing:
            return
        lines = [f"grete cluster: ZooKeeper (pid {zookeeper.process.pid}) died: {describe_exit(code)}; "
                 f"the brokers cannot stay registered. Last lines of {zookeeper.log_path}:"]
        lines += [f"    {line}" for line in tail(zookeeper.log_path)]
        print("\n".join(lines), file=sys.stderr, flush=True)

    # --- the control socket ------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._answering.add(task)
        task.add_done_callback(self._answering.discard)
        try:
            line = (await reader.readline()).decode(errors="replace").split()
            code, text = await self._answer(line)
            writer.write(f"{code}\n{text}".encode())
            await writer.drain()
        except ConnectionError:
            pass  # the asker went away; the operation itself has been carried out
        finally:
            writer.close()

    async def _answer(self, words: list[str]) -> tuple[int, str]:
        if words == ["status"]:
            return 0, await self.status()
        if words == ["stop"]:
            self.shut_down()
            await self.stopped.wait()
            return 0, "stopped every broker and " + ("ZooKeeper\n" if self._zk is not None else "the controllers\n")
        if len(words) == 2 and words[0] in ("restart", "stop") and words[1].isdigit():
            broker_id = int(words[1])
            if self._process(broker_id) is None:
                return 1, f"no broker {broker_id}: brokers are {sorted(self.running.brokers)}" + (
                    f", controllers {sorted(self._controllers())}\n" if self._controllers() else "\n")
            if self.condition.get(broker_id) in ("starting", "stopping"):
                return 1, f"broker {broker_id} is {self.condition[broker_id]} already\n"
            if words[0] == "stop":
                return await self.stop_broker(broker_id)
            return await self.restart_broker(broker_id)
        return 1, "requests: status | restart N | stop [N]\n"

    async def stop_broker(self, broker_id: int) -> tuple[int, str]:
        broker = self._process(broker_id)
        kind = "broker" if broker_id in self.running.brokers else "controller"
        assert broker is not None
        if broker.process.poll() is not None:
            return 0, f"{kind} {broker_id} is not running ({self.condition.get(broker_id, 'stopped')})\n"
        self.condition[broker_id] = "stopping"
        code = await self._in_lifecycle(lambda: broker.stop())
        self.condition[broker_id] = "stopped" if code == 0 else f"stopped ({describe_exit(code)})"
        return 0, f"{kind} {broker_id} {self.condition[broker_id]}\n"

    async def restart_broker(self, broker_id: int) -> tuple[int, str]:
        """A controlled shutdown first if it runs; then started again with its data and port."""
        found = self._process(broker_id)
        assert found is not None
        kind = "broker" if broker_id in self.running.brokers else "controller"
        if found.process.poll() is None:
            await self.stop_broker(broker_id)
        self.condition[broker_id] = "starting"
        try:
            broker = await self._in_lifecycle(lambda: self._start(broker_id))
        except BrokerStartError as exc:
            self.condition[broker_id] = "failed to start"
            return 1, f"{kind} {broker_id} did not start: {exc}\n"
        del self.condition[broker_id]
        self._keep(self._watch(broker_id, broker, kind))
        return 0, f"{kind} {broker_id} restarted: pid {broker.pid}, port {broker.port}\n"

    def _start(self, node_id: int) -> BrokerProcess:
        quorum = self.running.quorum
        if node_id in self.running.brokers or quorum is None:
            return self.running.start_broker(node_id)
        quorum.start_controller(node_id)
        return quorum.controllers[node_id]

    async def status(self) -> str:
        controller, registered = await asyncio.to_thread(self._registrations)
        rows = [("BROKER", "PID", "PORT", "ROLE", "HEALTH")]
        for broker_id, broker in sorted(self.running.brokers.items()):
            role = "controller" if broker_id == controller else "-"
            health = await self._health(broker_id, broker, broker_id in registered)
            rows.append((str(broker_id), str(broker.pid), str(broker.port), role, health))
        zookeeper = self.running.zookeeper
        if zookeeper is not None:
            assert zookeeper.process is not None
            alive = zookeeper.process.poll() is None and await asyncio.to_thread(zookeeper.ready)
            rows.append(("zookeeper", str(zookeeper.process.pid), str(zookeeper.port), "-",
                         "healthy" if alive else "dead"))
        for node_id, process in sorted(self._controllers().items()):
            role = "leader" if node_id == controller else "voter"
            health = self.condition.get(node_id) or (
                "healthy" if process.process.poll() is None else f"dead: {describe_exit(process.process.returncode)}")
            rows.append((str(node_id), str(process.pid), str(process.port), role, health))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
                       for row in rows)

    def _registrations(self) -> tuple[int, set[int]]:
        """(the controller's id, or -1; the broker ids registered) from /controller and /brokers/ids;
        nothing while ZooKeeper does not answer (its own line then says so). In KRaft: the quorum's
        leader, and the brokers a running broker lists (registered and unfenced)."""
        quorum = self.running.quorum
        if quorum is not None:
            return quorum.leader(), _listed(self.running.brokers.values())
        assert self._zk is not None
        controller, registered = -1, set()
        try:
            registered = {int(child) for child in self._zk.get_children(zk.BROKER_IDS)}
            controller = zk.decode_controller(self._zk.get(zk.CONTROLLER)[0])
        except NoNodeError:
            pass  # no broker registered yet, or no controller elected
        except KazooException:
            return -1, set()
        return controller, registered

    async def _health(self, broker_id: int, broker: BrokerProcess, registered: bool) -> str:
        """healthy: running, registered in ZooKeeper and answering Metadata on its port."""
        if broker_id in self.condition:
            return self.condition[broker_id]
        if broker.process.poll() is not None:
            return f"dead: {describe_exit(broker.process.returncode)}"
        if not registered:
            return "running, not registered"
        answers = await asyncio.to_thread(_answers_metadata, broker)
        return "healthy" if answers else "running, not answering"


def _listed(brokers: Iterable[BrokerProcess]) -> set[int]:
    """The brokers a running broker's Metadata lists (in KRaft: registered and unfenced)."""
    for broker in brokers:
        if broker.process.poll() is not None:
            continue
        try:
            answer = _wire.call(broker.host, broker.port, MetadataRequest(topics=[]), MetadataResponse, 9,
                                timeout=PROBE_TIMEOUT_S)
        except OSError:
            continue
        return {b.node_id for b in answer.brokers}
    return set()


def _answers_metadata(broker: BrokerProcess) -> bool:
    try:
        _wire.call(broker.host, broker.port, MetadataRequest(topics=[]), MetadataResponse, 9,
                   timeout=PROBE_TIMEOUT_S)
    except OSError:
        return False
    return True
