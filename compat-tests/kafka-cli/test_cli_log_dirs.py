"""kafka-log-dirs --describe: every log dir of the broker with the partitions it holds (DescribeLogDirs)."""

from __future__ import annotations

import json
import os

import pytest


@pytest.mark.parametrize("fresh_topic", [2], indirect=True)
def test_log_dirs_describe_shows_the_topic(kafka_cli, broker, fresh_topic):
    out = kafka_cli.ok("kafka-log-dirs", "--describe", "--topic-list", fresh_topic)
    # The tool prints two header lines, then one JSON document.
    document = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    entries = document["brokers"]  # one per broker of the target (a cluster's partitions spread over them)
    assert len(entries) == broker.nodes
    dirs = {d["logDir"]: d for entry in entries for d in entry["logDirs"]}
    assert os.path.abspath(str(broker.log_dir)) in {os.path.abspath(d) for d in dirs}
    partitions = {p["partition"]: p for d in dirs.values() if d["error"] is None for p in d["partitions"]}
    assert sorted(partitions) == [f"{fresh_topic}-0", f"{fresh_topic}-1"]
    assert all(p["isFuture"] is False and p["offsetLag"] == 0 and p["size"] >= 0 for p in partitions.values())
