"""Apicurio Registry with kafkasql storage (tools/apicurio_dist.py) as a process, and its
Confluent-compatible REST API (``/apis/ccompat/v7``) through the standard library.

The registry keeps every change in the topic ``kafkasql-journal`` and rebuilds its state from it on
start: it creates its topics, joins a fresh consumer group on the journal, reads it to the end and only
then reports ready (``/health/ready`` on the management port). So a start that never gets the journal
partition assigned never gets ready: the start deadline is what catches that stall.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools import apicurio_dist
from tools.reference_kafka import die_with_parent, free_port, stop_process

# From the JVM's start to ready: 40-50 s on this 2-core box under the load of other work
# (Quarkus boots, then the registry reads its journal). A start still not ready after this stalled.
START_TIMEOUT = 180.0
SCHEMA_TYPE = "application/vnd.schemaregistry.v1+json"


def avro_record(*fields: tuple[str, str] | tuple[str, str, Any]) -> str:
    """An Avro record schema ``Order`` with ``fields`` as (name, type[, default])."""
    out = []
    for f in fields:
        entry: dict[str, Any] = {"name": f[0], "type": f[1]}
        if len(f) == 3:
            entry["default"] = f[2]
        out.append(entry)
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": out})


@dataclass
class Start:
    """How long one start took: JVM spawned -> ready, and -> the first schema registered."""
    ready: float
    first_registration: float | None = None
    bootstrapped_ms: int | None = None  # the registry's own "KafkaSQL storage bootstrapped in N ms"
    client_warnings: list[str] = field(default_factory=list)  # its Kafka clients' WARN/ERROR lines, at stop


@dataclass
class Registry:
    """One registry JVM on ``bootstrap``; ``start`` / ``stop`` may be called again (a restart)."""

    bootstrap: str
    workdir: Path
    properties: dict[str, str] = field(default_factory=dict)  # more -D settings (apicurio_dist.properties)
    proc: subprocess.Popen[bytes] | None = None
    http_port: int = 0
    management_port: int = 0
    starts: list[Start] = field(default_factory=list)
    log_path: Path = field(default=Path("/dev/null"), init=False)  # the current (or last) start's: registry-<n>.log
    _spawned_at: float = 0.0
    _running: Start | None = None  # the start that got ready and has not been stopped yet

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/apis/ccompat/v7"

    def start(self, timeout: float = START_TIMEOUT) -> Start:
        """Spawn the JVM and wait until it reports ready; fails with the log's tail if it exits or stalls."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.http_port, self.management_port = free_port(), free_port()
        self.log_path = self.workdir / f"registry-{len(self.starts)}.log"
        cmd = apicurio_dist.command(self.bootstrap, self.http_port, self.management_port, self.properties)
        self._spawned_at = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir, start_new_session=True, preexec_fn=die_with_parent)
        self._await(self._ready, "ready (/health/ready UP)", timeout)
        start = Start(ready=time.monotonic() - self._spawned_at, bootstrapped_ms=self._bootstrapped_ms())
        self.starts.append(start)
        self._running = start
        return start

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, grace=30.0)
            self.proc = None
        if self._running is not None:
            self._running.client_warnings = [line for line in self.log_path.read_text(errors="replace").splitlines()
                                             if re.search(r" (WARN|ERROR) \[org\.apache\.kafka", line)]
            self._running = None

    def register(self, subject: str, schema: str) -> tuple[int, Any]:
        """POST a new version of ``subject``; the first success of a start is timed."""
        status, body = self.call("POST", f"/subjects/{subject}/versions", {"schema": schema})
        if status == 200 and self.starts and self.starts[-1].first_registration is None:
            self.starts[-1].first_registration = time.monotonic() - self._spawned_at
        return status, body

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One REST call: (HTTP status, decoded JSON body); an error status is returned, not raised."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.api + path, data=data, method=method,
                                         headers={"Content-Type": SCHEMA_TYPE, "Accept": SCHEMA_TYPE})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        assert status == 200, f"GET {path}: {status} {body}"
        return body

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _ready(self) -> bool:
        url = f"http://127.0.0.1:{self.management_port}/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return bool(json.loads(answer.read()).get("status") == "UP")
        except (OSError, ValueError):  # not listening yet, or 503 while the storage is not ready
            return False

    def _bootstrapped_ms(self) -> int | None:
        match = re.search(r"KafkaSQL storage bootstrapped in (\d+) ms", self.log_path.read_text(errors="replace"))
        return int(match.group(1)) if match else None

    def _await(self, condition: Any, what: str, timeout: float) -> None:
        """Poll the HTTP endpoint (an external JVM offers nothing to park on) until ``condition``,
        failing at once if the JVM exits and with the log's tail at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"registry exited ({self.proc.returncode}); {self._story()}")
            if condition():
                return
            time.sleep(0.5)
        raise AssertionError(f"registry not {what} after {timeout:.0f}s (stalled); {self._story()}")

    def _story(self) -> str:
        """The log lines about its topics (group assignments, ListOffsets retries), then the tail."""
        journal = [line for line in self.log_path.read_text(errors="replace").splitlines()
                   if "kafkasql" in line and "\tat " not in line]
        return "its kafkasql lines:\n" + "\n".join(journal[-25:]) + f"\n--- log tail:\n{self.log_tail()}"


# --- the scenario both test files run ----------------------------------------------------------

V1 = avro_record(("id", "long"))
V2 = avro_record(("id", "long"), ("note", "string", ""))  # BACKWARD-compatible: a new field with a default
V3 = avro_record(("id", "string"))  # not BACKWARD-compatible: long -> string


def evolve(registry: Registry, subject: str) -> tuple[int, int]:
    """v1 registered, BACKWARD set on the subject, v2 accepted, v3 refused with 409 (the check
    endpoint says so too). Returns the ids of v1 and v2."""
    status, body = registry.register(subject, V1)
    assert status == 200, f"v1: {status} {body}"
    v1 = body["id"]
    status, body = registry.call("PUT", f"/config/{subject}", {"compatibility": "BACKWARD"})
    assert (status, body["compatibility"]) == (200, "BACKWARD"), body
    status, body = registry.call("POST", f"/compatibility/subjects/{subject}/versions/latest", {"schema": V3})
    assert (status, body) == (200, {"is_compatible": False}), body
    status, body = registry.register(subject, V2)
    assert status == 200, f"v2: {status} {body}"
    v2 = body["id"]
    assert v2 != v1
    status, body = registry.register(subject, V3)
    assert (status, body["error_code"]) == (409, 409), f"v3: {status} {body}"
    return v1, v2


def read_back(registry: Registry, subject: str, ids: tuple[int, int]) -> None:
    """What :func:`evolve` left, as a restarted registry rebuilt it from the journal: both versions,
    both schemas by id, the subject's BACKWARD rule, and v3 still refused."""
    assert registry.get("/subjects") == [subject]
    assert registry.get(f"/subjects/{subject}/versions") == [1, 2]
    assert registry.get(f"/config/{subject}") == {"compatibilityLevel": "BACKWARD"}
    for version, (schema_id, schema) in enumerate(zip(ids, (V1, V2), strict=True), start=1):
        assert json.loads(registry.get(f"/schemas/ids/{schema_id}")["schema"]) == json.loads(schema)
        got = registry.get(f"/subjects/{subject}/versions/{version}")
        assert (got["id"], json.loads(got["schema"])) == (schema_id, json.loads(schema))
    status, body = registry.register(subject, V3)
    assert (status, body["error_code"]) == (409, 409), f"v3 after restart: {status} {body}"


def evolve_restart_read_back(registry: Registry, subject: str) -> None:
    """The whole scenario on a registry not started yet: start, :func:`evolve`, restart,
    :func:`read_back`, stop."""
    registry.start()
    ids = evolve(registry, subject)
    registry.stop()
    registry.start()
    read_back(registry, subject, ids)
    registry.stop()


def summary(what: str, starts: list[Start]) -> str:
    """One line per start: seconds to ready and to the first registration, the journal's replay."""
    rows = [f"  start {n}: ready {s.ready:.1f}s, first registration "
            + (f"{s.first_registration:.1f}s" if s.first_registration is not None else "-")
            + f", kafkasql bootstrapped in {s.bootstrapped_ms} ms, {len(s.client_warnings)} Kafka client WARN/ERROR"
            + "".join(f"\n    {line[:300]}" for line in s.client_warnings[:5]) for n, s in enumerate(starts)]
    return f"schema registry, {what}:\n" + "\n".join(rows)
