"""Java kafka-clients 4.3 with group.protocol=consumer (KIP-848, the AsyncKafkaConsumer): the driver's
`group` mode with three members on six partitions, then one leaves; each phase's records are read
once, by their partition's owner, and the leaver's partitions continue from its commits. One JVM;
against grete and Kafka 4.x (3.9 has no consumer protocol).

The module runs its own broker with a 1 s heartbeat interval (Kafka's floor is 5 s; the Java client
rejects heartbeat.interval.ms / session.timeout.ms under this protocol), the same for both targets."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import defaultdict
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from test_java_scenarios import check_phase

from tools import kafka_dist
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
    if target == "grete":
        from grete.testing import broker

        with broker(FAST_HEARTBEATS, subprocess=True) as b:
            yield b.bootstrap_servers
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
