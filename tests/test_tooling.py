"""Quick checks of the test tooling: Kafka's jars from Maven, tool main classes, ports, the reference broker."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest

from tools import kafka_dist
from tools.reference_kafka import ReferenceKafka, free_port, port_open, stop_process

POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def fetched_or_skip(version: str) -> Path:
    """The version's libs/, fetching if needed; skips where Maven cannot run (no mvn or no network)."""
    try:
        return kafka_dist.fetch(version)
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"Kafka {version} jars unavailable: {exc}")


def test_aliases_resolve_to_pinned_versions():
    assert kafka_dist.resolve_version("3.9") == kafka_dist.PINNED[0]
    assert kafka_dist.resolve_version("kafka-4") == kafka_dist.PINNED[1]
    assert kafka_dist.resolve_version("3.8.1") == "3.8.1"
    assert [kafka_dist.major(v) for v in kafka_dist.PINNED] == [3, 4]


@pytest.mark.parametrize("version", kafka_dist.PINNED)
def test_pom_lists_broker_tools_and_one_logging_binding(version):
    root = ET.fromstring(kafka_dist.pom_xml(version))
    deps = {(d.findtext("m:groupId", namespaces=POM_NS), d.findtext("m:artifactId", namespaces=POM_NS)):
            d.findtext("m:version", namespaces=POM_NS) for d in root.iterfind(".//m:dependency", POM_NS)}
    for artifact in ("kafka_2.13", "kafka-tools", "kafka-clients", "kafka-server", "kafka-storage"):
        assert deps[("org.apache.kafka", artifact)] == version
    bindings = {a for (_, a) in deps if a in {"slf4j-reload4j", "log4j-slf4j-impl"}}
    assert len(bindings) == 1


def test_cache_dir_follows_grete_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("GRETE_CACHE", str(tmp_path))
    assert kafka_dist.libs_dir("4") == tmp_path / "kafka" / kafka_dist.PINNED[1] / "libs"
    assert not kafka_dist.is_fetched("4")  # an empty cache is not mistaken for a complete one


@pytest.mark.parametrize("version", kafka_dist.PINNED)
def test_second_fetch_is_a_no_op(version):
    libs = fetched_or_skip(version)
    before = {p.name: p.stat().st_mtime_ns for p in libs.iterdir()}
    t0 = time.monotonic()
    assert kafka_dist.fetch(version) == libs
    assert time.monotonic() - t0 < 1.0
    assert {p.name: p.stat().st_mtime_ns for p in libs.iterdir()} == before


@pytest.mark.parametrize("version", kafka_dist.PINNED)
def test_classpath_holds_the_kafka_jars(version):
    fetched_or_skip(version)
    names = {Path(p).name for p in kafka_dist.kafka_classpath(version).split(os.pathsep)}
    for jar in (f"kafka_2.13-{version}.jar", f"kafka-tools-{version}.jar", f"kafka-clients-{version}.jar"):
        assert jar in names
    assert not any(n.startswith("connect-runtime") for n in names)


@pytest.mark.parametrize("version", kafka_dist.PINNED)
def test_every_tool_main_class_exists_in_the_jars(version):
    libs = fetched_or_skip(version)
    classes: set[str] = set()
    for jar in libs.glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            classes.update(n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class"))
    missing = {tool: cls for tool, cls in kafka_dist.tools(version).items() if cls not in classes}
    assert not missing, f"main classes not in Kafka {version}'s jars: {missing}"


def test_unknown_tool_is_refused():
    with pytest.raises(KeyError):
        kafka_dist.main_class("4", "kafka-no-such-tool")
    assert kafka_dist.main_class("4", "org.example.Main") == "org.example.Main"


@pytest.mark.parametrize("version", kafka_dist.PINNED)
def test_java_cmd_runs_a_tool(version):
    fetched_or_skip(version)
    cmd = kafka_dist.java_cmd(version, "kafka-storage", "random-uuid")
    assert cmd[0] == "java" and cmd[cmd.index("-cp") + 2] == "kafka.tools.StorageTool"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # A Kafka UUID: 16 bytes in URL-safe base64 without padding.
    assert len(base64.urlsafe_b64decode(done.stdout.strip() + "==")) == 16


def test_free_port_is_bindable_and_closed():
    port = free_port()
    assert 1024 <= port <= 65535
    assert not port_open("127.0.0.1", port, timeout=0.2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert port_open("127.0.0.1", port, timeout=0.2)


def test_stop_process_kills_what_ignores_sigterm():
    proc = subprocess.Popen(["python3", "-c", "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
                             "print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    t0 = time.monotonic()
    stop_process(proc, grace=0.3)
    assert proc.returncode == -9
    assert time.monotonic() - t0 < 5


@pytest.mark.slow
@pytest.mark.parametrize("version", ["3.9", "4"])
def test_reference_kafka_starts_serves_and_cleans_up(version):
    fetched_or_skip(version)
    from confluent_kafka.admin import AdminClient

    with ReferenceKafka(version) as kafka:
        workdir, proc = kafka.workdir, kafka.proc
        assert workdir is not None and proc is not None
        md = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
        assert [b.port for b in md.brokers.values()] == [kafka.port]  # advertised = where we connected
        assert (kafka.log_dir / "meta.properties").is_file()
        assert kafka.startup_seconds is not None and kafka.startup_seconds < 60
    assert proc.poll() is not None
    assert not workdir.exists()
    assert not port_open("127.0.0.1", kafka.port, timeout=0.2)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state  # a zombie has already died


def test_children_die_with_a_killed_parent():
    parent_code = (
        "import subprocess, sys, time\n"
        "from tools.reference_kafka import die_with_parent\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
        "                     preexec_fn=die_with_parent, start_new_session=True)\n"
        "print(c.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    repo = Path(__file__).resolve().parent.parent
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, cwd=repo)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
