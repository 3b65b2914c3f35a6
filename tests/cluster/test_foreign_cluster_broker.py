"""A KRaft broker whose log dir was formatted for another cluster, pointed at a quorum: the quorum
answers its fetches INCONSISTENT_CLUSTER_ID, and the broker says so in its log (Kafka logs it as an
ERROR on every answer; grete once a minute) instead of waiting in silence."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from grete.broker.child_process import spawn
from grete.storage.files import uuid_to_kafka
from grete.testing.cluster import cluster
from grete.testing.common import free_port
from grete.testing.kraft import format_storage, write_properties
from grete.testing.process import serve_command

pytestmark = pytest.mark.slow


def test_a_broker_of_another_cluster_says_why_it_is_not_let_in(tmp_path: Path) -> None:
    with cluster(1, directory=tmp_path / "c", controllers=1) as nodes:
        items = nodes.broker_items(1)
        items.update({"node.id": "4", "log.dirs": str(tmp_path / "stranger"),
                      "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}"})
        properties = tmp_path / "stranger.properties"
        write_properties(properties, items)
        other = uuid_to_kafka(uuid.uuid4())
        format_storage(properties, other)
        log_path = tmp_path / "stranger.log"
        stranger = spawn(serve_command(items), log_path)
        try:
            deadline = time.monotonic() + 30
            while "INCONSISTENT_CLUSTER_ID" not in log_path.read_text(errors="replace"):
                assert stranger.poll() is None and time.monotonic() < deadline, log_path.read_text()[-2000:]
                time.sleep(0.2)
            assert f"this node's cluster id {other} is not the quorum's" in log_path.read_text()
        finally:
            stranger.kill()
            stranger.wait(10)
