"""kafka-metadata-quorum describe and kafka-cluster cluster-id: the KRaft quorum behind a single node.

A single node is a quorum of one, on Kafka 4 (combined mode) as on grete: it is the only voter and
the leader, its high watermark moves as metadata changes, and it is caught up with itself.
"""

from __future__ import annotations

import json


def _status(kafka_cli) -> dict[str, str]:
    out = kafka_cli.ok("kafka-metadata-quorum", "describe", "--status")
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in out.splitlines())
            if key.strip()}


def test_status_names_this_node_the_only_voter_and_leader(kafka_cli, make_topic):
    before = _status(kafka_cli)
    leader = int(before["LeaderId"])
    voters = json.loads(before["CurrentVoters"])
    assert [v["id"] for v in voters] == [leader]
    assert int(before["LeaderEpoch"]) >= 1 and int(before["MaxFollowerLag"]) == 0
    make_topic(partitions=2)  # a metadata change: the log and its high watermark move on
    after = _status(kafka_cli)
    assert int(after["HighWatermark"]) > int(before["HighWatermark"]) > 0
    assert after["ClusterId"] == before["ClusterId"] and after["LeaderId"] == before["LeaderId"]


def test_replication_shows_the_leader_caught_up(kafka_cli):
    out = kafka_cli.ok("kafka-metadata-quorum", "describe", "--replication")
    header, *rows = [line.split() for line in out.splitlines() if line.strip()]
    assert header[:4] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag"]
    leaders = [row for row in rows if row[-1] == "Leader"]
    assert len(leaders) == 1 and leaders[0][3] == "0" and int(leaders[0][2]) > 0


def test_cluster_id_is_the_quorums(kafka_cli):
    """kafka-cluster cluster-id (DescribeCluster) names the cluster the quorum describes."""
    out = kafka_cli.ok("kafka-cluster", "cluster-id", "--bootstrap-server", kafka_cli.broker.bootstrap,
                       bootstrap_flag=False)
    assert out.strip() == f"Cluster ID: {_status(kafka_cli)['ClusterId']}"
