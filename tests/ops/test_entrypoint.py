"""docker/entrypoint.py: KAFKA_* variables to server.properties as the official apache/kafka image
maps them, and the whole entrypoint serving a real client (on the host, outside any image)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grete.broker.config import BrokerConfig, read_properties
from grete.broker.network.listeners import parse_listeners, security_protocol
from grete.testing.common import free_port

from ._support import DOCKER, REPO, entrypoint, round_trip, wait_serving

ep = entrypoint()


@pytest.mark.parametrize("name, key", [
    ("KAFKA_NUM_PARTITIONS", "num.partitions"),
    ("KAFKA_ABC_DEF", "abc.def"),           # the examples of the official image's README
    ("KAFKA_ABC___DEF", "abc-def"),
    ("KAFKA_ABC__DEF", "abc_def"),
    ("KAFKA_LISTENER_NAME_INTERNAL_SSL_KEYSTORE_LOCATION", "listener.name.internal.ssl.keystore.location"),
    ("KAFKA_MAX_CONNECTIONS_PER_IP_OVERRIDES", "max.connections.per.ip.overrides"),
])
def test_variable_names_map_to_kafka_keys(name, key):
    assert ep.env_key(name) == key
    assert ep.key_env(key) == name


def _render(environ, file_lines=()):
    notes: list[str] = []
    text = ep.render(environ, list(file_lines), notes)
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"ep-{os.getpid()}.properties"
    path.write_text(text)
    try:
        return read_properties(path), notes
    finally:
        path.unlink()


def test_defaults_are_kafkas_shipped_file_in_a_container():
    props, notes = _render({})
    assert props["listeners"] == "PLAINTEXT://:9092"
    assert props["advertised.listeners"] == "PLAINTEXT://localhost:9092"
    assert props["log.dirs"] == "/var/lib/grete/data"
    assert notes == []
    BrokerConfig(props, strict=True)  # every default is a key grete knows, with a valid value


def test_environment_overrides_defaults_and_listeners_follow_the_advertised_ones():
    props, _ = _render({"KAFKA_ADVERTISED_LISTENERS": "INTERNAL://grete-1:19092,EXTERNAL://localhost:9092",
                        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                        "KAFKA_NUM_PARTITIONS": "3", "CLUSTER_ID": "abc", "PATH": "/bin"})
    assert props["listeners"] == "INTERNAL://:19092,EXTERNAL://:9092"
    assert props["num.partitions"] == "3" and props["cluster.id"] == "abc"
    config = BrokerConfig(props, strict=True)
    assert [(x.name, x.host, x.port) for x in parse_listeners(config.get_list("listeners"))] == [
        ("INTERNAL", "", 19092), ("EXTERNAL", "", 9092)]
    assert security_protocol(config, "INTERNAL") == "PLAINTEXT"


def test_only_listeners_given_means_they_are_advertised():
    props, _ = _render({"KAFKA_LISTENERS": "PLAINTEXT://127.0.0.1:1234"})
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:1234"
    assert "advertised.listeners" not in props


def test_file_input_replaces_defaults_and_environment_wins():
    props, _ = _render({"KAFKA_NUM_PARTITIONS": "7"},
                       ["num.partitions=2", "log.dirs=/data/a,/data/b", "# comment"])
    assert props["num.partitions"] == "7"
    assert props["log.dirs"] == "/data/a,/data/b"
    assert "advertised.listeners" not in props


def test_jvm_variables_are_reported_and_skipped_and_log4j_level_maps():
    props, notes = _render({"KAFKA_HEAP_OPTS": "-Xmx1G", "KAFKA_LOG4J_ROOT_LOGLEVEL": "WARN"})
    assert not any(k.startswith("heap") or k.startswith("log4j") for k in props)
    assert notes == ["KAFKA_HEAP_OPTS is a JVM setting: ignored by grete"]
    cmd = ep.command({"KAFKA_LOG4J_ROOT_LOGLEVEL": "WARN"}, ["--override", "a=b"], Path("/c"))
    assert cmd == ["grete", "serve", "/c", "--log-level", "WARNING", "--override", "a=b"]
    assert ep.command({}, ["bash", "-l"], Path("/c")) == ["bash", "-l"]


def test_a_line_break_in_a_value_is_refused():
    with pytest.raises(SystemExit, match="KAFKA_X"):
        _render({"KAFKA_X": "a\nb=c"})


def test_entrypoint_serves_a_client_and_stops_cleanly_on_sigterm(tmp_path):
    """The script itself, exec'ing a `grete` on PATH that runs this checkout."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "grete"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m grete.cli \"$@\"\n")
    shim.chmod(0o755)
    port, metrics = free_port(), free_port()
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(REPO), "GRETE_CONFIG_DIR": str(tmp_path / "etc"),
           "KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}", "KAFKA_LOG_DIRS": str(tmp_path / "data"),
           "KAFKA_METRICS_LISTENER": f"http://127.0.0.1:{metrics}", "KAFKA_NUM_PARTITIONS": "2"}
    proc = subprocess.Popen([sys.executable, str(DOCKER / "entrypoint.py")], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_serving(proc)
        assert (tmp_path / "etc" / "server.properties").stat().st_mode & 0o777 == 0o600
        round_trip(f"127.0.0.1:{port}", "ep-topic", partitions=2)
    finally:
        proc.send_signal(signal.SIGTERM)  # the entrypoint exec'd grete: the signal reaches the broker
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "stopped cleanly" in out
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists()
