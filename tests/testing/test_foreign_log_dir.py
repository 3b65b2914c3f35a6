"""A log dir formatted for another node: `grete serve` refuses it in one line, Kafka's words, and
exits 1 (no traceback), leaving the dir as it was."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grete.testing.common import free_port

REPO = Path(__file__).resolve().parents[2]


def serve(data: Path, node_id: int) -> subprocess.CompletedProcess[str]:
    port, controller = free_port(), free_port()
    items = {"node.id": str(node_id), "process.roles": "broker,controller", "log.dirs": str(data),
             "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
             "controller.listener.names": "CONTROLLER", "controller.quorum.voters": f"{node_id}@127.0.0.1:{controller}"}
    command = [sys.executable, "-m", "grete.cli", "serve"]
    for key, value in items.items():
        command += ["--override", f"{key}={value}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=REPO,
                          stdin=subprocess.DEVNULL, start_new_session=True)


def test_a_dir_of_another_node_is_refused_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    # as `kafka-storage format` leaves a dir for node 5
    (data / "meta.properties").write_text("#\nnode.id=5\ndirectory.id=Xk7wH7N0RkO8wz1lX5GfWQ\nversion=1\n"
                                          "cluster.id=MkU3OEVBNTcwNTJENDM2Qg\n")
    before = (data / "meta.properties").read_text()
    refused = serve(data, node_id=4)
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr
    assert (f"grete: Stored node id 5 doesn't match previous node id 4 in {data / 'meta.properties'}. If you moved "
            "your data, make sure your configured node id matches.") in refused.stderr
    assert (data / "meta.properties").read_text() == before
