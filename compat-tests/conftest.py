"""Fixtures for the compatibility tests: one broker per session, either grete or a reference Kafka.

    pytest compat-tests --target=grete        (default; or GRETE_TEST_TARGET=grete)
    pytest compat-tests --target=kafka-3.9    Apache Kafka 3.9.x from Maven Central, KRaft single node
    pytest compat-tests --target=kafka-4      Apache Kafka 4.x
    pytest compat-tests --target=grete-kraft  a grete KRaft cluster: 3 brokers under one grete controller

The same test body runs against every target, which makes the reference runs the oracle for what
grete must do. Every test under compat-tests/ is marked ``compat``; against a reference Kafka it is
also marked ``slow`` (those runs exist to validate the tests, not grete).

Kafka's CLI tools run from the jars of every pinned version (``kafka_cli`` is parametrized over
them; GRETE_CLI_VERSIONS="4" narrows it).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # tools/ is not an installed package
    sys.path.insert(0, str(REPO))

from grete.testing.cluster import cluster  # noqa: E402
from tools import kafka_dist  # noqa: E402
from tools.kafka_admin import create_topic  # noqa: E402,F401  (re-exported for the compat tests)
from tools.reference_kafka import (  # noqa: E402
    ReferenceKafka,
    die_with_parent,
    free_port,
    port_open,
    stop_process,
)

TARGETS = ("grete", "grete-kraft", "kafka-3.9", "kafka-4")
COMPAT_DIR = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--target", choices=TARGETS, default=None,
                     help="broker the compat tests run against (default: $GRETE_TEST_TARGET or grete)")
    parser.addoption("--single-node-suites-on-clusters", action="store_true", default=False,
                     help="run the wire and security suites against a cluster target too (by hand; their raw "
                          "requests then go where a client sends them: grete/testing/routed_wire.py)")


def target_of(config: pytest.Config) -> str:
    chosen = config.getoption("--target", default=None) or os.environ.get("GRETE_TEST_TARGET") or "grete"
    if chosen not in TARGETS:
        raise pytest.UsageError(f"unknown target {chosen!r}; choose one of {', '.join(TARGETS)}")
    return str(chosen)


# Folders whose every test starts JVMs (Kafka's tools, the Java clients, Connect) or a 3-broker
# cluster: in the full run, not in the quick tier.
SLOW_FOLDERS = frozenset({"kafka-cli", "java", "cluster", "connect", "kafka-streams", "kafka-tools"})


# Suites written against one broker's socket: on a cluster target only when asked for, their requests
# then routed as a client routes them (docs/compatibility.md).
SINGLE_NODE_FOLDERS = frozenset({"wire", "security"})


@pytest.hookimpl(tryfirst=True)  # before -m deselects, so the added marks count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    target = target_of(config)
    reference = not target.startswith("grete")
    single_node = pytest.mark.skip(reason=f"speaks to one broker's socket: single nodes only, not {target}")
    for item in items:
        path = Path(str(item.path))
        if COMPAT_DIR not in path.parents:
            continue
        item.add_marker(pytest.mark.compat)
        folder = path.relative_to(COMPAT_DIR).parts[0]
        if reference or folder in SLOW_FOLDERS:
            item.add_marker(pytest.mark.slow)
        if (target == "grete-kraft" and folder in SINGLE_NODE_FOLDERS
                and not config.getoption("--single-node-suites-on-clusters")):
            item.add_marker(single_node)


def pytest_report_header(config: pytest.Config) -> str:
    return f"compat target: {target_of(config)}"


# --- the broker ------------------------------------------------------------------------------

@dataclass
class Broker:
    bootstrap: str  # "host:port"
    kind: str  # "grete" or "kafka-<full version>"
    log_dir: Path
    reference: ReferenceKafka | None = field(default=None, repr=False)
    nodes: int = 1  # brokers behind ``bootstrap``
    cluster_dirs: tuple[Path, ...] = ()  # a cluster's: every broker's log dir

    @property
    def log_dirs(self) -> tuple[Path, ...]:
        """Where partitions live: this broker's log dir, or every broker's of a cluster (a
        partition's replicas are on some of them: tools/client_drivers.partition_dir finds one)."""
        return self.cluster_dirs or (self.log_dir,)

    @property
    def is_grete(self) -> bool:
        return self.kind == "grete"

    @property
    def address(self) -> tuple[str, int]:
        """The first broker's host and port (of a cluster's comma-separated bootstrap, broker 1's)."""
        host, port = self.bootstrap.split(",")[0].rsplit(":", 1)
        return host, int(port)


def api_versions_ok(host: str, port: int, timeout: float = 2.0) -> bool:
    """One ApiVersions v0 round trip on a raw socket: the least any Kafka client does first."""
    import socket

    client_id = b"grete-compat"
    correlation = 0x2A7E
    body = struct.pack(">hhih", 18, 0, correlation, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 4)
            (size,) = struct.unpack(">i", head)
            resp = _recv_exact(s, size)
    except (OSError, ValueError):
        return False
    if len(resp) < 6:
        return False
    got_correlation, error_code = struct.unpack(">ih", resp[:6])
    return got_correlation == correlation and error_code == 0


def _recv_exact(s: object, n: int) -> bytes:
    import socket

    assert isinstance(s, socket.socket)
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ValueError("connection closed")
        buf += chunk
    return bytes(buf)


class GreteProcess:
    """grete's broker as a subprocess on a free port; skips the session if it cannot start."""

    def __init__(self, data_dir: Path, start_timeout: float = 30.0) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.start_timeout = start_timeout
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        listener = f"PLAINTEXT://127.0.0.1:{self.port}"
        return [sys.executable, "-m", "grete.cli", "serve",
                "--override", f"listeners={listener}",
                "--override", f"advertised.listeners={listener}",
                "--override", f"log.dirs={self.data_dir}"]

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                                         preexec_fn=die_with_parent)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.skip(f"grete broker did not start (exit {self.proc.returncode}): {self.log_tail(5)}")
            if port_open("127.0.0.1", self.port) and api_versions_ok("127.0.0.1", self.port):
                return
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"grete broker not serving ApiVersions after {self.start_timeout}s: {self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return "(no output)"

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=10.0)
            self.proc = None


@pytest.fixture(scope="session")
def target(pytestconfig: pytest.Config) -> str:
    return target_of(pytestconfig)


@pytest.fixture(scope="session")
def broker(target: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    if target == "grete":
        data = tmp_path_factory.mktemp("grete-data")
        proc = GreteProcess(data)
        try:
            proc.start()
            yield Broker(bootstrap=f"127.0.0.1:{proc.port}", kind="grete", log_dir=data)
        finally:
            proc.stop()
        return
    if target == "grete-kraft":
        with cluster(3, directory=tmp_path_factory.mktemp("grete-kraft"), controllers=1) as running:
            yield Broker(bootstrap=running.bootstrap_servers, kind="grete", log_dir=running.brokers[1].data_dir,
                         nodes=len(running.brokers),
                         cluster_dirs=tuple(b.data_dir for _, b in sorted(running.brokers.items())))
        return
    version = target.removeprefix("kafka-")
    try:
        kafka_dist.fetch(version)
    except Exception as exc:  # no mvn / no network: the reference runs cannot happen here
        pytest.skip(f"Kafka {version} jars unavailable: {exc}")
    with ReferenceKafka(version) as ref:
        yield Broker(bootstrap=ref.bootstrap, kind=ref.kind, log_dir=ref.log_dir, reference=ref)


# --- topics ----------------------------------------------------------------------------------

def unique_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin_client(bootstrap: str) -> object:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.fixture
def make_topic(broker: Broker) -> Callable[..., str]:
    """Factory: ``make_topic(partitions=3, config={"cleanup.policy": "compact"}) -> name``."""
    def make(partitions: int = 1, config: dict[str, str] | None = None, prefix: str = "t") -> str:
        name = unique_name(prefix)
        create_topic(broker.bootstrap, name, partitions, config)
        return name
    return make


@pytest.fixture
def fresh_topic(request: pytest.FixtureRequest, make_topic: Callable[..., str]) -> str:
    """A new topic with 1 partition, or N with ``@pytest.mark.parametrize("fresh_topic", [N], indirect=True)``."""
    partitions = int(getattr(request, "param", 1))
    return make_topic(partitions=partitions)


# --- Kafka's CLI tools -----------------------------------------------------------------------

@dataclass
class KafkaCli:
    """Runs one Kafka version's CLI tools against the session's broker."""

    version: str
    broker: Broker

    @property
    def major(self) -> int:
        return kafka_dist.major(self.version)

    def reader_property(self) -> str:
        """The console producer's flag for parse.key and friends (4.x deprecates --property)."""
        return "--reader-property" if self.major >= 4 else "--property"

    def formatter_property(self) -> str:
        """The console consumer's flag for print.key and friends (4.x deprecates --property)."""
        return "--formatter-property" if self.major >= 4 else "--property"

    def run(self, tool: str, *args: str, input: str | None = None, timeout: float = 120.0,
            bootstrap_flag: bool = True) -> subprocess.CompletedProcess[str]:
        flag = ("--bootstrap-server", self.broker.bootstrap) if bootstrap_flag else ()
        return kafka_dist.run_tool(self.version, tool, *flag, *args, input=input, timeout=timeout)

    def ok(self, tool: str, *args: str, **kw: object) -> str:
        """Run and assert exit 0; returns stdout."""
        done = self.run(tool, *args, **kw)  # type: ignore[arg-type]
        assert done.returncode == 0, (
            f"{tool} {' '.join(args)} (Kafka {self.version} tools) exited {done.returncode}\n"
            f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}")
        return done.stdout


def cli_versions() -> list[str]:
    wanted = os.environ.get("GRETE_CLI_VERSIONS")
    if wanted:
        return [kafka_dist.resolve_version(v.strip()) for v in wanted.split(",") if v.strip()]
    return list(kafka_dist.PINNED)


def tool_versions() -> list[Any]:
    """The CLI tools' and Java clients' versions: the newest pinned in the default run, the older
    ones in the ``long`` tier (run by hand with -m long), which keeps the suite in its time budget."""
    newest = cli_versions()[-1]
    return [v if v == newest else pytest.param(v, marks=pytest.mark.long) for v in cli_versions()]


@pytest.fixture(params=tool_versions(), ids=lambda v: f"cli-{v}")
def kafka_cli(request: pytest.FixtureRequest, broker: Broker) -> KafkaCli:
    version = str(request.param)
    try:
        kafka_dist.fetch(version)
    except Exception as exc:
        pytest.skip(f"Kafka {version} tools unavailable: {exc}")
    return KafkaCli(version=version, broker=broker)


# --- stock-client helpers --------------------------------------------------------------------

@pytest.fixture
def produce(broker: Broker) -> Callable[..., int]:
    """``produce(topic, [(key, value), ...], partition=None, **producer_config) -> count`` via librdkafka."""
    from confluent_kafka import Producer

    def send(topic: str, messages: list[tuple[bytes | None, bytes]], partition: int | None = None,
             **config: object) -> int:
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **config})
        errors: list[object] = []
        for key, value in messages:
            kw: dict[str, object] = {"key": key, "value": value,
                                     "on_delivery": lambda err, _m: errors.append(err) if err else None}
            if partition is not None:
                kw["partition"] = partition
            p.produce(topic, **kw)
        left = p.flush(30)
        assert left == 0, f"{left} messages not delivered"
        assert not errors, f"delivery errors: {errors}"
        return len(messages)
    return send


# --- Java's kafka-clients (tools/java/GreteJavaClient.java) ------------------------------------

@dataclass
class JavaClient:
    """Runs the Java harness with one version's kafka-clients; every command prints JSON lines."""

    version: str
    broker: Broker

    def run(self, command: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        cmd = kafka_dist.harness_cmd(self.version, command, self.broker.bootstrap, *args)
        return kafka_dist.run_java(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def ok(self, command: str, *args: str, timeout: float = 120.0) -> list[dict[str, object]]:
        import json

        done = self.run(command, *args, timeout=timeout)
        assert done.returncode == 0, (
            f"java {command} {' '.join(args)} (kafka-clients {self.version}) exited {done.returncode}\n"
            f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}")
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(params=tool_versions(), ids=lambda v: f"java-{v}")
def java_client(request: pytest.FixtureRequest, broker: Broker) -> JavaClient:
    version = str(request.param)
    try:
        kafka_dist.harness_classes(version)
    except Exception as exc:
        pytest.skip(f"Java harness for kafka-clients {version} unavailable: {exc}")
    return JavaClient(version=version, broker=broker)
