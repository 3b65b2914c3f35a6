"""kafka-leader-election and kafka-reassign-partitions against a single node: nothing to elect, no
reassignment in progress, and a plan naming a broker that does not exist is refused."""

from __future__ import annotations

import json


def test_leader_election_is_never_needed(kafka_cli, fresh_topic):
    one = kafka_cli.run("kafka-leader-election", "--election-type", "preferred", "--topic", fresh_topic,
                        "--partition", "0")
    assert "already elected" in one.stdout + one.stderr, one.stdout + one.stderr
    every = kafka_cli.ok("kafka-leader-election", "--election-type", "preferred", "--all-topic-partitions")
    assert "needed" in every or every.strip() == "", every


def test_reassignments(kafka_cli, broker, fresh_topic, tmp_path):
    listed = kafka_cli.ok("kafka-reassign-partitions", "--list")
    assert "No partition reassignments found" in listed, listed
    node = _node_id(kafka_cli)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": fresh_topic, "partition": 0, "replicas": [node + 100]}]}))
    refused = kafka_cli.run("kafka-reassign-partitions", "--execute", "--reassignment-json-file", str(bad))
    assert refused.returncode != 0 or "Error" in refused.stdout + refused.stderr
    same = tmp_path / "same.json"
    same.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": fresh_topic, "partition": 0, "replicas": [node]}]}))
    kafka_cli.ok("kafka-reassign-partitions", "--execute", "--reassignment-json-file", str(same))
    verified = kafka_cli.ok("kafka-reassign-partitions", "--verify", "--reassignment-json-file", str(same))
    assert "is completed" in verified or "complete" in verified, verified


def _node_id(kafka_cli) -> int:
    out = kafka_cli.ok("kafka-broker-api-versions")
    first = out.splitlines()[0]  # "127.0.0.1:PORT (id: 1 rack: null) -> ("
    return int(first.split("(id:")[1].split()[0])
