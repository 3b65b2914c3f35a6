"""``python -m tools.kafka_dist layout``: a Kafka distribution (bin/, libs/ with Connect, config/)
whose scripts work as users type them, against a grete node."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tools import kafka_dist

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("kafka-run-class", "kafka-topics", "kafka-console-producer", "kafka-console-consumer",
           "kafka-consumer-groups", "kafka-configs", "kafka-acls", "kafka-features", "kafka-metadata-quorum",
           "kafka-producer-perf-test", "kafka-consumer-perf-test", "kafka-get-offsets", "kafka-delete-records",
           "kafka-leader-election", "kafka-reassign-partitions", "kafka-transactions", "kafka-dump-log",
           "connect-distributed", "connect-standalone", "connect-mirror-maker")
CONNECT_JARS = ("connect-api", "connect-runtime", "connect-json", "connect-file", "connect-transforms",
                "connect-mirror", "connect-mirror-client")
CONFIGS = ("server.properties", "connect-distributed.properties", "connect-standalone.properties",
           "connect-file-source.properties", "connect-file-sink.properties", "connect-mirror-maker.properties")
VERSIONS = [pytest.param("4.3.1"), pytest.param("3.9.2", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def laid_out() -> dict[str, Path]:
    return {}


def dist(laid_out: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, version: str) -> Path:
    """The version laid out once per module, through the command line users run."""
    if version not in laid_out:
        dest = tmp_path_factory.mktemp(f"kafka-{version}")
        done = subprocess.run([sys.executable, "-m", "tools.kafka_dist", "layout", "--version", version,
                               "--dest", str(dest)], cwd=REPO, capture_output=True, text=True, timeout=900)
        if done.returncode != 0 and ("mvn" in done.stderr or "Could not" in done.stderr):
            pytest.skip(f"Kafka {version} with Connect unavailable: {done.stderr[-500:]}")
        assert done.returncode == 0, done.stderr[-3000:]
        laid_out[version] = dest
    return laid_out[version]


@pytest.mark.parametrize("version", kafka_dist.PINNED)
def test_layout_has_the_scripts_jars_and_configs(laid_out, tmp_path_factory, version):
    root = dist(laid_out, tmp_path_factory, version)
    classes = kafka_dist.jar_classes(root / "libs")
    for name in SCRIPTS:
        script = root / "bin" / f"{name}.sh"
        assert script.is_file() and script.stat().st_mode & 0o111, script
        if name != "kafka-run-class":
            runs = re.search(r"kafka-run-class\.sh\"? (?:\"\$\{extra\[@\]\}\" )?([\w.$]+) ", script.read_text())
            assert runs is not None and runs.group(1) in classes, f"{name}.sh: {runs and runs.group(1)}"
    jars = {p.name for p in (root / "libs").glob("*.jar")}
    for artifact in (*CONNECT_JARS, "kafka-clients", "kafka-tools", "kafka_2.13"):
        assert f"{artifact}-{version}.jar" in jars
    for name in CONFIGS:
        assert (root / "config" / name).is_file()


def test_layout_again_keeps_edited_config(laid_out, tmp_path_factory):
    root = dist(laid_out, tmp_path_factory, "4.3.1")
    edited = root / "config" / "connect-distributed.properties"
    edited.write_text("bootstrap.servers=somewhere:9092\n")
    kafka_dist.layout("4.3.1", root)
    assert edited.read_text() == "bootstrap.servers=somewhere:9092\n"
    assert (root / "bin" / "kafka-topics.sh").is_file()


def run(root: Path, script: str, *args: str, input: str | None = None) -> str:
    done = subprocess.run([str(root / "bin" / f"{script}.sh"), *args], capture_output=True, text=True,
                          input=input, timeout=180, stdin=None if input is not None else subprocess.DEVNULL)
    assert done.returncode == 0, f"{script}.sh {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("version", VERSIONS)
def test_scripts_against_a_grete_node(laid_out, tmp_path_factory, grete_broker_process, version):
    root = dist(laid_out, tmp_path_factory, version)
    bootstrap = ("--bootstrap-server", grete_broker_process.bootstrap_servers)
    topic = f"layout-{uuid.uuid4().hex[:8]}"
    assert f"Created topic {topic}." in run(root, "kafka-topics", *bootstrap, "--create", "--topic", topic,
                                            "--partitions", "2")
    assert topic in run(root, "kafka-topics", *bootstrap, "--list").split()
    described = run(root, "kafka-topics", *bootstrap, "--describe", "--topic", topic)
    assert re.search(rf"Topic: {topic}\s.*PartitionCount: 2", described)
    lines = [f"record-{i}" for i in range(5)]
    run(root, "kafka-console-producer", *bootstrap, "--topic", topic, input="\n".join(lines) + "\n")
    consumed = run(root, "kafka-console-consumer", *bootstrap, "--topic", topic, "--from-beginning",
                   "--max-messages", str(len(lines)), "--timeout-ms", "60000")
    records = [line for line in consumed.splitlines() if line.startswith("record-")]
    assert sorted(records) == lines  # two partitions: no order across them
