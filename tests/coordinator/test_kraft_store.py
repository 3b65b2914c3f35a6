"""The embedded node's metadata as a KRaft quorum of one: every change a record batch in
``__cluster_metadata-0``, replayed at start; an old ``grete-metadata.json`` taken over once."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from grete.coordinator.kraft import quorum_store
from grete.coordinator.kraft.local import IMPORTED_SUFFIX, open_local_store
from grete.coordinator.kraft.quorum import QUORUM_STATE_FILE, SingleVoterQuorum
from grete.coordinator.kraft.quorum_store import QuorumMetadataStore
from grete.coordinator.kraft.raft_log import RaftBatch
from grete.coordinator.kraft.store import KRaftMetadataStore
from grete.coordinator.metadata import (
    METADATA_FILE,
    DelegationTokenInfo,
    ScramCredential,
    TopicExists,
    quota_entity,
)
from grete.protocol.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import (
    FeatureLevelRecord,
    LeaderChangeMessage,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from grete.protocol.metadata_frame import decode_control_value, decode_metadata_record
from grete.protocol.records.control import ControlType, parse_control_key
from grete.protocol.records.record import decode_records
from grete.storage.files import META_PROPERTIES, read_properties, uuid_to_kafka
from tools import kafka_dist

ACL = AclBinding(ResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                 AclPermissionType.ALLOW)
CREDENTIAL = ScramCredential(b"salt", b"stored", b"server", 4096)
TOKEN = DelegationTokenInfo("tok", "User:alice", "User:alice", ("User:bob",), 1, 3, 2)


def _reopen(store: KRaftMetadataStore, directory: Path) -> KRaftMetadataStore:
    store.close()
    return open_local_store(directory, store.quorum.node_id)


async def _change_everything(store: KRaftMetadataStore) -> None:
    await store.create_topic("orders", {0: [1], 1: [1]}, {"retention.ms": "1000", "cleanup.policy": "compact"})
    await store.create_topic("gone", {0: [1]}, {"retention.ms": "5"})
    await store.delete_topic("gone")
    await store.add_partitions("orders", {2: [1]})
    await store.set_topic_configs("orders", {"retention.ms": "2000"})
    await store.set_broker_configs("", {"log.retention.ms": "7"})
    await store.set_broker_configs("1", {"log.cleaner.threads": "2"})
    await store.set_group_configs("g", {"share.auto.offset.reset": "earliest"})
    await store.set_client_metrics("m", {"interval.ms": "1000"})
    await store.set_scram_credential("alice", "SCRAM-SHA-256", CREDENTIAL)
    await store.set_scram_credential("bob", "SCRAM-SHA-512", CREDENTIAL)
    await store.set_scram_credential("bob", "SCRAM-SHA-512", None)
    await store.add_acls([ACL])
    await store.alter_client_quotas(quota_entity({"user": "alice"}), {"producer_byte_rate": 1024.0})
    await store.alter_client_quotas(quota_entity({"client-id": None}), {"consumer_byte_rate": 5.0})
    await store.alter_client_quotas(quota_entity({"client-id": None}), {"consumer_byte_rate": None})
    await store.set_delegation_token(TOKEN)
    assert await store.allocate_producer_ids(1000) == 0
    await store.set_finalized_features({"group.version": 1, "share.version": 0})


def _state(store: KRaftMetadataStore) -> dict[str, object]:
    topics = {name: (t.topic_id, t.configs, {i: (p.leader, p.leader_epoch, p.replicas, p.isr)
                                           for i, p in t.partitions.items()}) for name, t in store.topics().items()}
    return {"topics": topics, "brokers": (store.broker_configs(""), store.broker_configs("1")),
            "groups": store.group_configs("g"), "metrics": store.client_metrics("m"),
            "scram": store.scram_credentials(), "acls": store.acls(), "quotas": store.client_quotas(),
            "tokens": store.delegation_tokens(), "features": store.finalized_features()[1],
            "next_producer_id": store.next_producer_id, "cluster": store.cluster_id}


def test_every_change_survives_a_restart(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, 1)
    asyncio.run(_change_everything(store))
    before = _state(store)
    assert before["topics"]["orders"][1] == {"retention.ms": "2000"}  # type: ignore[index]
    assert set(before["topics"]) == {"orders"}  # type: ignore[arg-type]
    assert before["scram"] == {"alice": {"SCRAM-SHA-256": CREDENTIAL}}
    assert before["quotas"] == {quota_entity({"user": "alice"}): {"producer_byte_rate": 1024.0}}
    assert before["features"] == {"group.version": 1}
    again = _reopen(store, tmp_path)
    assert _state(again) == before
    assert again.records_applied > 20
    with pytest.raises(TopicExists):
        asyncio.run(again.create_topic("orders", {0: [1]}, {}))
    assert asyncio.run(again.allocate_producer_ids(1000)) == 1000  # ids never repeat
    again.close()


def test_records_are_kafkas_and_every_start_is_a_new_epoch(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, 7)
    asyncio.run(store.create_topic("t", {0: [7]}, {}))
    store = _reopen(store, tmp_path)
    store.close()
    quorum = SingleVoterQuorum(tmp_path, 7, store.quorum.directory_id)
    kinds = [type(record) for _offset, record, _version in quorum.replay()]
    assert kinds.count(TopicRecord) == 1 and kinds.count(PartitionRecord) == 1 and RemoveTopicRecord not in kinds
    leaders = []
    for batch in quorum.log.batches(0):
        if batch.is_control:
            (record,) = decode_records(batch)
            assert parse_control_key(record.key) == ControlType.LEADER_CHANGE
            message = decode_control_value(ControlType.LEADER_CHANGE, record.value or b"")
            assert isinstance(message, LeaderChangeMessage)
            leaders.append((batch.partition_leader_epoch, message.leader_id))
    assert leaders == [(1, 7), (2, 7)]
    state = json.loads((quorum.partition_dir / QUORUM_STATE_FILE).read_text())
    assert state == {"leaderId": 7, "leaderEpoch": 2, "votedId": -1, "data_version": 1}
    quorum.close()


def test_a_dir_formatted_for_another_node_is_refused(tmp_path: Path) -> None:
    open_local_store(tmp_path, 7).close()
    with pytest.raises(KafkaError) as refused:
        open_local_store(tmp_path, 8)
    assert str(tmp_path / META_PROPERTIES) in (refused.value.message or "")


# grete-metadata.json as grete wrote it before the metadata log (its format version 1).
LEGACY = {
    "version": 1, "cluster_id": "Fm0Ll4yWQeKpL0YyJb1PMw", "broker_configs": {"": {"log.retention.ms": "7"}},
    "group_configs": {}, "client_metrics": {}, "next_producer_id": 2000, "finalized_features": None,
    "finalized_features_epoch": 0, "scram_credentials": {}, "delegation_tokens": [], "client_quotas": [],
    "acls": [{"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL",
              "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}],
    "topics": [{"name": "old", "topic_id": "3Xv7bqOvQcSyF0lJ4m2Y1g", "internal": False,
                "configs": {"retention.ms": "9"},
                "partitions": {"0": {"leader": 1, "leader_epoch": 0, "replicas": [1], "isr": [1]},
                               # epochs must not go back: clients ignore older metadata
                               "1": {"leader": 1, "leader_epoch": 5, "replicas": [1], "isr": [1]}}}],
}


def test_a_data_dir_of_the_json_file_is_taken_over_once(tmp_path: Path) -> None:
    (tmp_path / METADATA_FILE).write_text(json.dumps(LEGACY))
    store = open_local_store(tmp_path, 1)
    assert store.cluster_id == LEGACY["cluster_id"]
    assert read_properties(tmp_path / META_PROPERTIES)["cluster.id"] == LEGACY["cluster_id"]  # type: ignore[index]
    old = store.topic("old")
    assert old is not None and uuid_to_kafka(old.topic_id) == "3Xv7bqOvQcSyF0lJ4m2Y1g"
    assert old.configs == {"retention.ms": "9"} and old.partitions[1].leader_epoch == 5
    assert store.acls() == {ACL} and store.broker_configs("") == {"log.retention.ms": "7"}
    assert store.next_producer_id >= 2000  # ids never repeat
    assert not (tmp_path / METADATA_FILE).exists() and (tmp_path / (METADATA_FILE + IMPORTED_SUFFIX)).exists()
    applied = store.records_applied
    again = _reopen(store, tmp_path)
    assert again.records_applied == applied and again.topic("old") is not None  # imported once, not twice
    again.close()


def test_a_snapshot_replaces_the_log_it_covers(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, 1, snapshot_bytes=2000)
    asyncio.run(_change_everything(store))
    for index in range(20):  # enough records for a few snapshots
        asyncio.run(store.create_topic(f"t{index}", {0: [1]}, {"retention.ms": str(index)}))
    before = _state(store)
    partition_dir = store.quorum.partition_dir
    snapshots = sorted(partition_dir.glob("*.checkpoint"))
    assert len(snapshots) == 1  # older ones go with the segments they cover
    end = int(snapshots[0].name.split("-")[0])
    assert store.quorum.log.log_start_offset == end > 0
    segments = sorted(p.name for p in partition_dir.glob("*.log"))
    assert all(int(name.removesuffix(".log")) >= end for name in segments)
    store.close()
    again = open_local_store(tmp_path, 1, snapshot_bytes=2000)
    assert _state(again) == before
    assert again.acls() == {ACL} and again._acl_ids == store._acl_ids  # ACL ids survive a snapshot
    again.close()
    # Kafka 4.3.1's own tool reads the snapshot and the log after it.
    kafka_dist.fetch("4.3.1")
    dumped = kafka_dist.run_tool("4.3.1", "kafka-dump-log", "--cluster-metadata-decoder", "--files",
                                 f"{snapshots[0]},{partition_dir / segments[-1]}", check=True).stdout
    assert '"type":"TOPIC_RECORD"' in dumped and '"name":"t19"' in dumped and "LeaderChange" in dumped
    assert "Snapshot end offset" in dumped or "SnapshotHeader" in dumped, dumped[-2000:]


def test_an_unreadable_json_file_stops_the_start_naming_it(tmp_path: Path) -> None:
    (tmp_path / METADATA_FILE).write_text('{"version": 1, "topics": [')
    with pytest.raises(KafkaError) as refused:
        open_local_store(tmp_path, 1)
    assert str(tmp_path / METADATA_FILE) in (refused.value.message or "")
    assert (tmp_path / METADATA_FILE).exists()  # left as it was


def test_changes_asked_at_once_are_decided_one_after_the_other() -> None:
    """A quorum's store decides each change on what is committed: three CreateTopics of one name at
    once (through three brokers) make one topic."""
    async def run() -> None:
        offset = 0

        async def append(values: list[bytes]) -> int:
            nonlocal offset
            await asyncio.sleep(0.01)  # the quorum's round trip, during which others may ask
            batch = RaftBatch(offset, 1, tuple(values))
            offset += len(values)
            store.apply_batch(batch)
            return offset - 1

        store = QuorumMetadataStore("cluster", append)
        await store.bootstrap([])  # a new quorum's first records
        created = await asyncio.gather(*(store.create_topic("t", {0: [1]}, {}) for _ in range(3)),
                                       return_exceptions=True)
        assert sorted(type(r).__name__ for r in created) == ["TopicExists", "TopicExists", "TopicMeta"]
        assert len([r for r in store.topics() if r == "t"]) == 1
    asyncio.run(run())


def test_a_new_quorum_writes_its_bootstrap_records_before_anything_else() -> None:
    """A write asked for between a new leader's election and its bootstrap records (a broker's
    registration) waits for them: metadata.version is the log's first metadata record, which Kafka's
    nodes need before any other (they stop on a log without it). Without them it is NOT_CONTROLLER."""
    async def run() -> None:
        written: list[str] = []

        async def append(values: list[bytes]) -> int:
            records = [decode_metadata_record(v)[0] for v in values]
            written.extend(type(r).__name__ for r in records)
            store.apply_batch(RaftBatch(len(written) - len(values), 1, tuple(values)))
            return len(written) - 1

        store = QuorumMetadataStore("cluster", append)
        registration = asyncio.ensure_future(store.commit([RegisterBrokerRecord(broker_id=1, broker_epoch=0,
                                                                                incarnation_id=uuid.uuid4())]))
        await asyncio.sleep(0.05)
        assert written == [] and not registration.done()
        await store.bootstrap([FeatureLevelRecord(name="metadata.version", feature_level=30)])
        await registration
        assert written == ["BeginTransactionRecord", "FeatureLevelRecord", "EndTransactionRecord", "RegisterBrokerRecord"]

        never = QuorumMetadataStore("cluster", append)
        quorum_store.ACTIVATION_WAIT_S, saved = 0.05, quorum_store.ACTIVATION_WAIT_S
        try:
            with pytest.raises(KafkaError) as refused:
                await never.commit([RegisterBrokerRecord(broker_id=2, broker_epoch=0, incarnation_id=uuid.uuid4())])
        finally:
            quorum_store.ACTIVATION_WAIT_S = saved
        assert refused.value.code == ErrorCode.NOT_CONTROLLER
    asyncio.run(run())
