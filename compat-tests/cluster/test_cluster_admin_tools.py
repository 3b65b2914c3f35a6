"""kafka-leader-election and kafka-reassign-partitions (Kafka 3.9.2's tools) against a 3-broker cluster."""

from __future__ import annotations

import json
from pathlib import Path

import cluster_helpers as h
from cluster_targets import ClusterTarget

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from grete.testing._wire import Wire

CLUSTER_OVERRIDES = {"auto.leader.rebalance.enable": "false"}  # only the tools move leaders here


def elected(out: str, prefix: str) -> set[str]:
    """The partitions named on the tool's ``prefix`` line (in no particular order)."""
    for line in out.splitlines():
        if line.startswith(prefix):
            return {p.strip() for p in line[len(prefix):].split(",")}
    return set()


def controller(target: ClusterTarget) -> int:
    zk = h.zk_client(target.zk_connect)
    try:
        return int(h.zk_json(zk, "/controller")["brokerid"])
    finally:
        zk.stop()


def restart(target: ClusterTarget, broker_id: int) -> None:
    target.cluster.start_broker(broker_id)
    h.wait_until(lambda: broker_id in h.metadata(target.bootstrap).brokers, 60, f"broker {broker_id} back")


def preferred_on_a_follower(target: ClusterTarget, name: str) -> tuple[int, int]:
    """(partition, victim): a partition whose preferred leader (not the controller) is stopped."""
    created = h.create_topic(target.bootstrap, name, partitions=3, replication=3)
    ctl = controller(target)
    partition, view = next((p, v) for p, v in sorted(created.items()) if v.replicas[0] != ctl)
    target.cluster.stop_broker(view.replicas[0])
    return partition, view.replicas[0]


def test_preferred_election_with_the_preferred_replica_stopped(cluster_target: ClusterTarget) -> None:
    name = h.unique("elect-down")
    partition, victim = preferred_on_a_follower(cluster_target, name)
    try:
        seen = h.partitions_seen(cluster_target.bootstrap, name)
        assert seen is not None and seen[partition].leader != victim
        done = h.tool("kafka-leader-election", "--bootstrap-server", cluster_target.bootstrap,
                      "--election-type", "preferred", "--topic", name, "--partition", str(partition))
        text = done.stdout + done.stderr
        assert done.returncode != 0, text
        assert f"Error completing leader election (PREFERRED) for partition: {name}-{partition}" in text, text
        assert "PreferredLeaderNotAvailableException" in text, text
    finally:
        restart(cluster_target, victim)


def test_preferred_election_after_a_restart(cluster_target: ClusterTarget) -> None:
    name = h.unique("elect")
    partition, victim = preferred_on_a_follower(cluster_target, name)
    restart(cluster_target, victim)
    # Every topic's, not only this one's: the election below asks for all partitions, and one whose
    # preferred replica (stopped by an earlier test) is still catching up would fail it.
    h.await_full_isrs(cluster_target.cluster, cluster_target.bootstrap, set(cluster_target.broker_ids))
    before = h.partitions_seen(cluster_target.bootstrap, name)
    assert before is not None and before[partition].leader != victim  # not moved back on its own
    zk = h.zk_client(cluster_target.zk_connect)
    try:
        epoch_before = h.zk_json(zk, f"/brokers/topics/{name}/partitions/{partition}/state")["leader_epoch"]
    finally:
        zk.stop()
    out = h.tool_ok("kafka-leader-election", "--bootstrap-server", cluster_target.bootstrap,
                    "--election-type", "preferred", "--all-topic-partitions")
    assert f"{name}-{partition}" in elected(out, "Successfully completed leader election (PREFERRED) for partitions"), out
    after = h.wait_until(lambda: (s := h.partitions_seen(cluster_target.bootstrap, name))
                         and s[partition].leader == victim and s, 30, "the preferred leader back")
    assert all(v.leader == v.replicas[0] for v in after.values())
    zk = h.zk_client(cluster_target.zk_connect)
    try:
        state = h.zk_json(zk, f"/brokers/topics/{name}/partitions/{partition}/state")
    finally:
        zk.stop()
    assert (state["leader"], state["leader_epoch"]) == (victim, epoch_before + 1)  # one bump for the election
    again = h.tool_ok("kafka-leader-election", "--bootstrap-server", cluster_target.bootstrap,
                      "--election-type", "preferred", "--topic", name, "--partition", str(partition))
    assert elected(again, "Valid replica already elected for partitions") == {f"{name}-{partition}"}, again


def test_reassignment_moves_a_replica(cluster_target: ClusterTarget, tmp_path: Path) -> None:
    name = h.unique("move")
    created = h.create_topic(cluster_target.bootstrap, name, partitions=1, replication=2)
    for i in range(5):
        assert h.produce_one(cluster_target.bootstrap, name, 0, b"r%d" % i) is None
    old = created[0].replicas
    target = [old[1]] + [b for b in cluster_target.broker_ids if b not in old]  # drop one, add the third
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": name, "partition": 0, "replicas": target}]}))
    bootstrap = ("--bootstrap-server", cluster_target.bootstrap)
    out = h.tool_ok("kafka-reassign-partitions", *bootstrap, "--execute", "--reassignment-json-file", str(plan))
    assert f"Successfully started partition reassignment for {name}-0" in out, out
    h.wait_until(lambda: f"Reassignment of partition {name}-0 is completed." in h.tool_ok(
        "kafka-reassign-partitions", *bootstrap, "--verify", "--reassignment-json-file", str(plan)), 60,
        "the reassignment to complete", interval=1.0)
    seen = h.wait_until(lambda: (s := h.partitions_seen(cluster_target.bootstrap, name))
                        and list(s[0].replicas) == target and set(s[0].isr) == set(target) and s, 30,
                        "clients seeing the new replicas")
    assert seen[0].leader == target[0]  # the old leader left; the first target replica in the ISR leads
    listed = h.tool_ok("kafka-reassign-partitions", *bootstrap, "--list")
    assert "No partition reassignments found." in listed, listed
    zk = h.zk_client(cluster_target.zk_connect)
    try:
        znode = h.zk_json(zk, f"/brokers/topics/{name}")
        state = h.zk_json(zk, f"/brokers/topics/{name}/partitions/0/state")
    finally:
        zk.stop()
    assert (znode["partitions"], znode["adding_replicas"], znode["removing_replicas"]) == ({"0": target}, {}, {})
    assert state["leader"] == target[0] and sorted(state["isr"]) == sorted(target) and state["leader_epoch"] > 0
    # The records moved with the replica: the new leader has all five.
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster_target.bootstrap, "group.id": h.unique("g"),
                         "log_level": 0, "logger": h.silent_logger()})
    try:
        # The new leader's high watermark starts where it had heard of it as a follower and moves on
        # with its followers' next fetch: until then ListOffsets answers OFFSET_NOT_AVAILABLE, which
        # clients retry (Kafka's brokers alike).
        h.wait_until(lambda: consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10) == (0, 5), 30,
                     "the new leader's watermarks (0, 5)")
    finally:
        consumer.close()


def test_features_as_a_zookeeper_mode_cluster(cluster_target: ClusterTarget) -> None:
    """Kafka 3.9 in ZooKeeper mode supports no feature: ApiVersions lists none, the controller refuses
    each update with INVALID_REQUEST, and any other broker answers NOT_CONTROLLER."""
    ctl = controller(cluster_target)
    key = UpdateFeaturesRequest.FeatureUpdateKey(feature="transaction.version", max_version_level=2)
    for broker_id in cluster_target.running():
        broker = cluster_target.cluster.brokers[broker_id]
        wire = Wire(broker.host, broker.port, timeout=30)
        try:
            versions = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                 ApiVersionsResponse, 3)
            assert versions.supported_features == [] and versions.finalized_features == []
            answer = wire.call(UpdateFeaturesRequest(timeout_ms=10000, feature_updates=[key]), UpdateFeaturesResponse, 1)
        finally:
            wire.close()
        if broker_id == ctl:
            assert answer.error_code == 0
            assert [(r.feature, r.error_code, r.error_message) for r in answer.results] == [
                ("transaction.version", ErrorCode.INVALID_REQUEST,
                 "Could not apply finalized feature update because the provided feature is not supported.")]
        else:
            assert (answer.error_code, answer.results) == (ErrorCode.NOT_CONTROLLER, [])
