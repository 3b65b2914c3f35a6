"""A real Apache Kafka broker for differential testing: one KRaft node (broker + controller) on 127.0.0.1.

    with ReferenceKafka("4") as kafka:
        print(kafka.bootstrap)        # "127.0.0.1:<port>"

The jars come from tools.kafka_dist (Maven Central). Data, config and the broker's log live in a
temporary directory that is removed on exit (set GRETE_KEEP_TMP=1 to keep it for a post-mortem).
``kill()`` SIGKILLs the broker and ``restart()`` brings it back on the same ports and data directory
(crash-recovery tests, e.g. tests/eos).
``python -m tools.reference_kafka 4`` starts one and waits for Ctrl-C.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from grete.coordinator.metadata import new_topic_id
from grete.storage.files import uuid_to_kafka
from grete.testing.common import free_port
from tools import kafka_dist


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def metadata_ok(bootstrap: str, timeout: float = 5.0) -> bool:
    """True when a stock client gets a Metadata answer that lists at least one broker."""
    from confluent_kafka.admin import AdminClient  # imported late: only the waiting needs it

    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": int(timeout * 1000),
                         "log_level": 0, "logger": _silent_logger()})
    try:
        md = admin.list_topics(timeout=timeout)
    except Exception:  # KafkaException while the broker is still coming up
        return False
    return len(md.brokers) > 0


def _silent_logger() -> object:
    import logging

    log = logging.getLogger("grete.reference_kafka.librdkafka")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


def die_with_parent() -> None:
    """preexec_fn: have Linux SIGTERM the child when the test process dies, so no broker outlives a
    killed pytest run (best effort; a no-op elsewhere)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def kill_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group (a crash: no clean shutdown) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def stop_process(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM the process group, wait ``grace`` seconds, then SIGKILL it."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
OAUTHBEARER_JAAS = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


@dataclass(frozen=True)
class Security:
    """A SASL_PLAINTEXT listener (and a SASL_SSL one when ``ssl_keystore`` is given) next to the
    PLAINTEXT one, with PLAIN users from ``plain_users``, SCRAM-SHA-256/512 enabled (credentials
    are created by AlterUserScramCredentials), OAUTHBEARER with Kafka's default unsecured-JWS
    validator, and optionally Kafka's StandardAuthorizer.

    Inter-broker and controller traffic stays on PLAINTEXT, whose principal is User:ANONYMOUS: it is
    made a super user, otherwise the node's own broker cannot register with its controller (Kafka
    checks CLUSTER_ACTION on BrokerRegistration) -- so tests must use the SASL ports only."""

    plain_users: dict[str, str] = field(default_factory=dict)  # name -> password
    super_users: tuple[str, ...] = ("admin",)
    authorizer: bool = True
    ssl_keystore: Path | None = None  # PEM: PKCS#8 key then the certificate chain, for SASL_SSL

    def jaas_plain(self) -> str:
        users = " ".join(f'user_{name}="{password}"' for name, password in self.plain_users.items())
        return f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"


def _distinct_ports(n: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


class ReferenceKafka:
    """Starts Apache Kafka ``version`` ('3.9', '4', or a full pinned version) as a single KRaft node."""

    def __init__(self, version: str = "4", overrides: dict[str, str] | None = None,
                 start_timeout: float = 90.0, log_level: str = "INFO",
                 jvm: tuple[str, ...] | None = None, security: Security | None = None) -> None:
        self.version = kafka_dist.resolve_version(version)
        self.overrides = dict(overrides or {})
        self.security = security
        self.sasl_port = 0
        self.sasl_ssl_port = 0
        self.start_timeout = start_timeout
        self.log_level = log_level
        self.jvm = jvm  # None: the light test settings of kafka_dist.java_cmd
        self.host = "127.0.0.1"
        self.port = 0
        self.controller_port = 0
        self.workdir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_seconds: float | None = None

    # --- what tests use -------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        assert self.security is not None, "started without security"
        return f"{self.host}:{self.sasl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        assert self.security is not None and self.security.ssl_keystore is not None, "no SASL_SSL listener"
        return f"{self.host}:{self.sasl_ssl_port}"

    @property
    def log_dir(self) -> Path:
        assert self.workdir is not None, "not started"
        return self.workdir / "data"

    @property
    def server_log(self) -> Path:
        assert self.workdir is not None, "not started"
        return self.workdir / "server.log"

    @property
    def kind(self) -> str:
        return f"kafka-{self.version}"

    # --- configuration --------------------------------------------------------------------
    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "min.insync.replicas": "1",
            "group.initial.rebalance.delay.ms": "0",
            # Fewer background threads: the box has two cores.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
        }
        if self.security is not None:
            props.update(self._security_properties(self.security))
        props.update(self.overrides)
        return props

    def _security_properties(self, sec: Security) -> dict[str, str]:
        listeners = [f"SASL_PLAINTEXT://{self.host}:{self.sasl_port}"]
        names = ["sasl_plaintext"]
        if sec.ssl_keystore is not None:
            listeners.append(f"SASL_SSL://{self.host}:{self.sasl_ssl_port}")
            names.append("sasl_ssl")
        props = {
            "listeners": ",".join([f"PLAINTEXT://{self.host}:{self.port}", *listeners,
                                   f"CONTROLLER://{self.host}:{self.controller_port}"]),
            "advertised.listeners": ",".join([f"PLAINTEXT://{self.host}:{self.port}", *listeners]),
            "listener.security.protocol.map": ("PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,"
                                               "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"),
            "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        }
        for name in names:
            # Every enabled mechanism needs a login module on the listener (no static JAAS file).
            props[f"listener.name.{name}.plain.sasl.jaas.config"] = sec.jaas_plain()
            for scram in ("scram-sha-256", "scram-sha-512"):
                props[f"listener.name.{name}.{scram}.sasl.jaas.config"] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;")
            props[f"listener.name.{name}.oauthbearer.sasl.jaas.config"] = OAUTHBEARER_JAAS
        if sec.ssl_keystore is not None:
            props["listener.name.sasl_ssl.ssl.keystore.type"] = "PEM"
            props["listener.name.sasl_ssl.ssl.keystore.location"] = str(sec.ssl_keystore)
        if sec.authorizer:
            props["authorizer.class.name"] = STANDARD_AUTHORIZER
            props["super.users"] = ";".join(f"User:{u}" for u in (*sec.super_users, "ANONYMOUS"))
        return props

    def _write_config(self) -> Path:
        assert self.workdir is not None
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        return path

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> ReferenceKafka:
        t0 = time.monotonic()
        kafka_dist.fetch(self.version)
        self.workdir = Path(tempfile.mkdtemp(prefix=f"refkafka-{self.version}-"))
        self.port, self.controller_port, self.sasl_port, self.sasl_ssl_port = _distinct_ports(4)
        config = self._write_config()
        self._format(config)
        self._launch(config)
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _format(self, config: Path) -> None:
        # Like Kafka's Uuid.randomUuid(), never an id starting with "-": kafka-storage's argument
        # parser would take it for an option (1 start in 64 failed before).
        cluster_id = uuid_to_kafka(new_topic_id())
        done = kafka_dist.run_tool(self.version, "kafka-storage", "format", "-t", cluster_id,
                                   "-c", str(config), timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")

    def _launch(self, config: Path, append: bool = False) -> None:
        cmd = kafka_dist.java_cmd(self.version, "kafka-server-start", str(config),
                                  log_level=self.log_level, quick_start=False, jvm=self.jvm)
        with open(self.server_log, "ab" if append else "wb") as log:
            # Own process group, so stop() reaches the JVM and anything it forks.
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=self.workdir,
                                         preexec_fn=die_with_parent)

    def _wait_ready(self, t0: float) -> None:
        assert self.proc is not None
        deadline = t0 + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka {self.version} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if port_open(self.host, self.port) and metadata_ok(self.bootstrap, timeout=2.0):
                return
            time.sleep(0.1)
        raise TimeoutError(f"Kafka {self.version} not serving after {self.start_timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.server_log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def kill(self) -> None:
        """SIGKILL the broker's process group: a crash, no clean shutdown. The data directory, config
        and ports stay, so restart() brings the same node back on the same data (log recovery included)."""
        if self.proc is None:
            return
        kill_process(self.proc)
        self.proc = None

    def restart(self) -> ReferenceKafka:
        """Start again on the same ports, config and data directory (after kill() or a crash)."""
        assert self.workdir is not None, "never started, or stopped (stop() removes the data)"
        if self.proc is not None:
            self.kill()
        t0 = time.monotonic()
        with open(self.server_log, "ab") as log:  # keep the first run's log for a post-mortem
            log.write(b"\n==== restart ====\n")
        self._launch(self.workdir / "server.properties", append=True)
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None
        if self.workdir is not None and not os.environ.get("GRETE_KEEP_TMP"):
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def __enter__(self) -> ReferenceKafka:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()


def _main(argv: list[str]) -> int:
    """``python -m tools.reference_kafka [VERSION] [--sasl]``; --sasl adds the SASL_PLAINTEXT listener
    with PLAIN users admin/admin-secret (super user), alice/alice-secret, bob/bob-secret and the
    StandardAuthorizer."""
    sasl = "--sasl" in argv
    args = [a for a in argv if a != "--sasl"]
    version = args[0] if args else "4"
    security = Security(plain_users={"admin": "admin-secret", "alice": "alice-secret",
                                     "bob": "bob-secret"}) if sasl else None
    with ReferenceKafka(version, security=security) as kafka:
        extra = f", SASL_PLAINTEXT on {kafka.sasl_bootstrap}" if sasl else ""
        print(f"Kafka {kafka.version} on {kafka.bootstrap}{extra} (started in {kafka.startup_seconds:.1f}s), "
              f"data {kafka.log_dir}; Ctrl-C stops it", flush=True)
        wait_while(lambda: kafka.proc is not None and kafka.proc.poll() is None)
    return 0


def wait_while(alive: Callable[[], bool]) -> None:
    """Until ``alive`` says no, or Ctrl-C: what the ``python -m tools.reference_kafka*`` commands do
    once their Kafka runs."""
    try:
        while alive():
            time.sleep(1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
