"""Java kafka-clients 4.3 with group.protocol=consumer (KIP-848, the AsyncKafkaConsumer): the driver's
`group` mode with three members on six partitions, then one leaves; each phase's records are read
once, by their partition's owner, and the leaver's partitions continue from its commits. One JVM;
against grete and Kafka 4.x (3.9 has no consumer protocol).

The module runs its own broker with a 1 s heartbeat interval (Kafka's floor is 5 s; the Java client
rejects heartbeat.interval.ms / session.timeout.ms under this protocol), the same for both targets."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from test_java_scenarios import check_phase

from grete.coordinator.groups.consumer_requests import ConsumerHeartbeat
from grete.coordinator.groups.group import GroupCoordinator
from grete.coordinator.groups.group_store import InMemoryOffsetsStore
from grete.coordinator.groups.group_types import GroupConfig
from tools import kafka_dist
from tools.grete_target import grete_target
from tools.reference_kafka import ReferenceKafka

FAST_HEARTBEATS = {"group.consumer.min.heartbeat.interval.ms": "1000",
                   "group.consumer.heartbeat.interval.ms": "1000"}
CLIENT = "4"


@pytest.fixture(scope="module")
def bootstrap(target: str) -> Iterator[str]:
    try:
        kafka_dist.harness_classes(CLIENT)
    except Exception as exc:
        pytest.skip(f"Java harness for kafka-clients {CLIENT} unavailable: {exc}")
    if target.startswith("grete"):
        with grete_target(target, FAST_HEARTBEATS) as servers:
            yield servers
        return
    version = target.removeprefix("kafka-")
    if kafka_dist.major(kafka_dist.resolve_version(version)) < 4:
        pytest.skip("the consumer group protocol is Kafka 4's")
    kafka_dist.fetch(version)
    with ReferenceKafka(version, overrides=FAST_HEARTBEATS) as ref:
        yield ref.bootstrap


def run(bootstrap: str, *args: str) -> list[dict[str, object]]:
    cmd = kafka_dist.harness_cmd(CLIENT, *args[:1], bootstrap, *args[1:])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"java {' '.join(args)} exited {done.returncode}\n{done.stdout[-3000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_consumer_protocol_group_of_three_then_one_leaves(bootstrap: str) -> None:
    topic, group = f"t848-{uuid.uuid4().hex[:8]}", f"g848-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(timeout=30)
    n = 24
    lines = run(bootstrap, "group", topic, group, "3", "6", str(n), "group.protocol=consumer")
    first = check_phase(lines, 1, {"m0", "m1", "m2"}, 6, [f"v{i}-{topic}" for i in range(n)])
    assert {"phase": 2, "left": "m0"} in lines
    second = check_phase(lines, 2, {"m1", "m2"}, 6, [f"v{i}-{topic}" for i in range(n, 2 * n)])
    assert set(first["m0"]) <= set(second["m1"]) | set(second["m2"])
    per_partition: dict[int, list[int]] = defaultdict(list)
    for x in lines:
        if "value" in x:
            per_partition[int(str(x["partition"]))].append(int(str(x["offset"])))
    # Every offset once: phase 2 started where phase 1 committed, on every partition.
    assert {p: sorted(o) for p, o in per_partition.items()} == {p: list(range(2 * n // 6)) for p in range(6)}


def test_kafka_decodes_the_consumer_group_records_grete_writes() -> None:
    """grete's __consumer_offsets records of a consumer group, read by Kafka 4.3.1's own deserializer
    (GroupCoordinatorRecordSerde): every record type, a static member, a regex, a revocation."""
    try:
        kafka_dist.harness_classes(CLIENT)
    except Exception as exc:
        pytest.skip(f"Java harness for kafka-clients {CLIENT} unavailable: {exc}")
    store = asyncio.run(_write_group_records())
    lines = "".join(f"{k.hex()} {'-' if v is None else v.hex()}\n" for k, v in store)
    cmd = kafka_dist.harness_cmd(CLIENT, "decode-group-records", "-")
    done = subprocess.run(cmd, input=lines, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    decoded = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(decoded) == len(store)
    text = "\n".join(f"{d['key']} => {d['value']}" for d in decoded)
    topic = base64.urlsafe_b64encode(TOPIC_ID.bytes).rstrip(b"=").decode()  # Kafka prints Uuids so
    for expected in [
        "ConsumerGroupMemberMetadataKey(groupId='g', memberId='A') => ConsumerGroupMemberMetadataValue("
        "instanceId='inst', rackId='r1', clientId='cid', clientHost='/127.0.0.1', subscribedTopicNames=[a], "
        "subscribedTopicRegex=null, rebalanceTimeoutMs=30000, serverAssignor='range'",
        "subscribedTopicNames=[], subscribedTopicRegex='a.*'",
        f"ConsumerGroupTargetAssignmentMemberKey(groupId='g', memberId='B') => ConsumerGroupTargetAssignmentMemberValue("
        f"topicPartitions=[TopicPartition(topicId={topic}, partitions=[2, 3])])",
        "ConsumerGroupMetadataKey(groupId='g') => ConsumerGroupMetadataValue(epoch=3",
        "ConsumerGroupTargetAssignmentMetadataKey(groupId='g') => ConsumerGroupTargetAssignmentMetadataValue("
        "assignmentEpoch=3",
        f"ConsumerGroupCurrentMemberAssignmentValue(memberEpoch=2, previousMemberEpoch=0, state=1, "
        f"assignedPartitions=[TopicPartitions(topicId={topic}, partitions=[0, 1], assignmentEpochs=[])], "
        f"partitionsPendingRevocation=[TopicPartitions(topicId={topic}, partitions=[2, 3]",
    ]:
        assert expected in text, f"{expected!r} not in:\n{text}"


TOPIC_ID = uuid.UUID("11111111-2222-3333-4444-555555555555")


async def _write_group_records() -> list[tuple[bytes, bytes | None]]:
    store = InMemoryOffsetsStore()
    coord = GroupCoordinator(GroupConfig(offsets_topic_num_partitions=1), store,
                             topic_view=lambda: {"a": (TOPIC_ID, 4)})
    await coord.start()

    async def beat(member: str, epoch: int, **fields: object) -> None:
        base: dict[str, object] = dict(
            group_id="g", member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000 if epoch == 0 else -1, subscribed_topic_names=["a"] if epoch == 0 else None,
            subscribed_topic_regex=None, server_assignor=None, owned=frozenset() if epoch == 0 else None,
            client_id="cid", client_host="/127.0.0.1")
        base.update(fields)
        result = await coord.consumer_group_heartbeat(ConsumerHeartbeat(**base))  # type: ignore[arg-type]
        assert result.error == 0, result

    await beat("A", 0, instance_id="inst", rack_id="r1", server_assignor="range")
    await beat("B", 0, subscribed_topic_names=None, subscribed_topic_regex="a.*")
    await beat("A", 2, instance_id="inst")  # a new group is at 1: the first join made 2
    await coord.shutdown()
    return store.partitions[0]


@pytest.mark.slow  # three more JVM starts (~8 s): run by hand, or with the slow tests
def test_kafka_consumer_groups_describes_a_consumer_protocol_group(bootstrap: str) -> None:
    """kafka-consumer-groups (Kafka 4.3.1's tools: Admin describeConsumerGroups over
    ConsumerGroupDescribe, ListGroups with types) on a group of one librdkafka consumer-protocol
    member holding all 3 partitions."""
    from confluent_kafka import Consumer

    topic, group = f"t848d-{uuid.uuid4().hex[:8]}", f"g848d-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(timeout=30)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                  "client.id": "describe-me"})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while len(c.assignment()) < 3:
            assert time.monotonic() < deadline, "no assignment"
            c.poll(0.1)
        listed = kafka_dist.run_tool(CLIENT, "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--list",
                                     "--type", "consumer")
        assert listed.returncode == 0, listed.stderr[-2000:]
        assert group in listed.stdout.split()
        state = kafka_dist.run_tool(CLIENT, "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                                    "--group", group, "--state")
        assert state.returncode == 0, state.stderr[-2000:]
        row = next(line.split() for line in state.stdout.splitlines() if line.startswith(group))
        assert row[-3:] == ["uniform", "Stable", "1"], state.stdout
        members = kafka_dist.run_tool(CLIENT, "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe",
                                      "--group", group, "--members")
        assert members.returncode == 0, members.stderr[-2000:]
        row = next(line.split() for line in members.stdout.splitlines() if line.startswith(group))
        assert row[-2:] == ["describe-me", "3"], members.stdout  # CLIENT-ID, #PARTITIONS
    finally:
        c.close()
