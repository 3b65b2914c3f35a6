"""The image, built and run here: docker/build-image (mmdebstrap base, ``--pull=never``), then the
broker started from it, a stock client (confluent-kafka) producing and consuming one record, the
Prometheus endpoint scraped, and SIGTERM stopping it cleanly.

``podman run --network host`` is tried first; where the OCI runtime cannot create containers (this
kind of sandbox: crun's setrlimit is refused) the image's entrypoint runs under ``buildah run
--isolation=chroot``, which shares the host's network. Skips, with the reason, where podman, buildah
or mmdebstrap are missing or the build cannot reach the Debian mirror or PyPI; any other build
failure fails. ~25 s with the Debian base cached, ~2 min without (docs/operations.md).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from grete.testing.common import free_port

from ._support import DOCKER, REPO, round_trip

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

IMAGE = "localhost/grete:ops-test"
# What a build without the network prints (mmdebstrap/apt, pip); anything else is a real failure.
NO_NETWORK = ("Temporary failure in name resolution", "Could not resolve", "Network is unreachable",
              "Failed to establish a new connection", "Connection timed out", "Failed to fetch",
              "Could not fetch URL", "Name or service not known")


def _run(*cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    for tool in ("podman", "buildah", "mmdebstrap"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (apt-get install podman buildah mmdebstrap)")
    info = _run("podman", "info")
    if info.returncode != 0:
        pytest.skip(f"podman cannot run here: {info.stderr.strip()[-300:]}")
    started = time.monotonic()
    build = subprocess.run([str(DOCKER / "build-image")], cwd=REPO, capture_output=True, text=True,
                           timeout=900, env={**os.environ, "IMAGE": IMAGE})
    output = build.stdout + build.stderr
    if build.returncode != 0:
        if any(marker in output for marker in NO_NETWORK):
            pytest.skip(f"the image build needs the Debian mirror and PyPI: {output.strip()[-400:]}")
        pytest.fail(f"docker/build-image failed ({build.returncode}):\n{output[-4000:]}")
    summary = re.search(r"^build-image: .*$", output, re.M)
    assert summary is not None, output[-2000:]
    print(f"{summary.group()} (test: {time.monotonic() - started:.1f} s in all)")
    try:
        yield IMAGE
    finally:
        _run("podman", "rmi", "--force", IMAGE)


def _inspect(image: str, field: str) -> object:
    done = _run("podman", "image", "inspect", image, "--format", "{{json .Config." + field + "}}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_image_is_small_non_root_with_a_data_volume(image):
    size = int(_run("podman", "image", "inspect", image, "--format", "{{.Size}}").stdout)
    assert size < 400e6, f"{size / 1e6:.0f} MB"  # a Debian minbase with python3 is ~180 MB of it
    assert _inspect(image, "User") == "grete"
    assert "/var/lib/grete" in (_inspect(image, "Volumes") or {})
    assert "9092/tcp" in (_inspect(image, "ExposedPorts") or {})


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid == pid:
                found.append(int(entry.name))
    return found


def _broker_pid(root: int) -> int | None:
    """The ``grete serve`` process under ``root`` (buildah run -> chroot exec -> grete)."""
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            cmdline = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in cmdline and any(part.endswith(b"/grete") for part in cmdline):
            return pid
        todo.extend(_children(pid))
    return None


def _wait_port(port: int, alive: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert callable(alive) and alive(), "the container exited before serving"
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def test_broker_in_the_image_serves_a_client_and_stops_cleanly(image, tmp_path):
    port, metrics = free_port(), free_port()
    env = {"KAFKA_LISTENERS": f"PLAINTEXT://127.0.0.1:{port}", "KAFKA_NUM_PARTITIONS": "2",
           "KAFKA_METRICS_LISTENER": f"http://127.0.0.1:{metrics}", "KAFKA_LOG4J_ROOT_LOGLEVEL": "INFO"}
    probe = _run("podman", "run", "--rm", "--network", "host", image, "true")
    if probe.returncode == 0:
        _with_podman_run(image, env, port, metrics)
    else:  # e.g. "crun: setrlimit `RLIMIT_NOFILE`: Operation not permitted" in this sandbox
        _with_buildah_run(image, env, port, metrics, tmp_path / "data")


def _exercise(port: int, metrics: int) -> None:
    round_trip(f"127.0.0.1:{port}", "ops-image", partitions=2)
    assert 'kafka_server_brokertopicmetrics_messagesin_total{topic="ops-image"} 1.0' in _scrape(metrics)


def _with_podman_run(image: str, env: dict[str, str], port: int, metrics: int) -> None:
    name = f"grete-ops-test-{os.getpid()}"
    args = [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
    started = _run("podman", "run", "-d", "--name", name, "--network", "host", *args, image)
    assert started.returncode == 0, started.stderr
    try:
        _wait_port(port, lambda: _run("podman", "inspect", name, "--format", "{{.State.Running}}")
                   .stdout.strip() == "true")
        _exercise(port, metrics)
        assert _run("podman", "stop", "--time", "30", name, timeout=60).returncode == 0
        assert _run("podman", "wait", name).stdout.strip() == "0"
        logs = _run("podman", "logs", name)
        assert "stopped cleanly" in logs.stdout + logs.stderr
    finally:
        _run("podman", "rm", "--force", name)


def _with_buildah_run(image: str, env: dict[str, str], port: int, metrics: int, data: Path) -> None:
    entry = _inspect(image, "Entrypoint")
    assert isinstance(entry, list)
    ctr = _run("buildah", "from", "--pull=never", image).stdout.strip()
    assert ctr, "buildah from failed"
    # The data dir as a host directory, as a volume would be: owned by the image's user.
    user = _run("buildah", "run", "--isolation=chroot", ctr, "--", "id", "-u").stdout.strip()
    data.mkdir()
    os.chown(data, int(user), int(user))
    try:
        # buildah run applies the image's user, workdir and environment but not its entrypoint:
        # run that entrypoint, with the test's variables on top.
        proc = subprocess.Popen(["buildah", "run", "--isolation=chroot", "--volume", f"{data}:/var/lib/grete/data",
                                 ctr, "--", "env",
                                 *(f"{k}={v}" for k, v in env.items()), *entry],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            _wait_port(port, lambda: proc.poll() is None)
            broker = _broker_pid(proc.pid)
            assert broker is not None
            uid = next(line.split()[1] for line in (Path("/proc") / str(broker) / "status").read_text()
                       .splitlines() if line.startswith("Uid:"))
            assert uid != "0", "the broker runs as root"
            _exercise(port, metrics)
            # buildah run does not pass SIGTERM on (it kills its child): signal the broker itself,
            # as a container runtime delivers the stop signal to the container's PID 1.
            os.kill(broker, signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, out
        assert "stopped cleanly" in out
        assert (data / ".kafka_cleanshutdown").exists()  # Kafka's clean-shutdown marker
        assert (data / "meta.properties").exists()
        segments = sorted(data.glob("ops-image-*/00000000000000000000.log"))
        assert len(segments) == 2 and sum(s.stat().st_size for s in segments) > 0
    finally:
        _run("buildah", "rm", ctr)
