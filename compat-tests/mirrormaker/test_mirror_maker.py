"""MirrorMaker 2 (Kafka 4.3.1, dedicated mode) between two single nodes of the session's target
(grete, or Kafka with ``--target=kafka-4`` / ``kafka-3.9``): records, topic configs and consumer
group offsets of ``src`` appear on ``dst``, read back with stock clients.

One MirrorMaker runs for the whole file (the ``mirror`` fixture); its start, a JVM that joins two
Connect groups and creates its topics on both clusters, takes most of a minute, so the file is
``long``.
"""

from __future__ import annotations

import time
from functools import partial

import pytest
from mirror_maker import (
    GROUP,
    PARTITIONS,
    PER_PARTITION,
    RETENTION_MS,
    Checkpoint,
    Mirror,
    committed,
    cpu_seconds,
    latest_checkpoints,
    read_partitions,
    requests_total,
    topic_configs,
    topics,
)

pytestmark = [pytest.mark.long, pytest.mark.timeout(900)]


def test_records_mirrored_in_order(mirror: Mirror) -> None:
    """``src.orders`` holds every record of ``orders``, partition by partition, in the same order,
    with the same keys, values and headers."""
    assert topics(mirror.dst.bootstrap)["src.orders"] == PARTITIONS
    upstream = read_partitions(mirror.src.bootstrap, "orders", PARTITIONS)
    downstream = read_partitions(mirror.dst.bootstrap, "src.orders", PARTITIONS)
    assert [len(upstream[p]) for p in range(PARTITIONS)] == [PER_PARTITION] * PARTITIONS
    for p in range(PARTITIONS):
        assert downstream[p] == upstream[p], f"partition {p} differs"


def test_topic_config_synced(mirror: Mirror) -> None:
    """The ``retention.ms`` the topic was created with, then one changed while MirrorMaker runs,
    appear on ``src.orders`` (sync.topic.configs every 2 s)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    def retention() -> str:
        return topic_configs(mirror.dst.bootstrap, ["src.orders"], ("retention.ms",))["src.orders"]["retention.ms"]

    mirror.mm2.await_(lambda: retention() == RETENTION_MS, f"retention.ms={RETENTION_MS} on src.orders")
    changed = str(int(RETENTION_MS) + 1000)
    admin = AdminClient({"bootstrap.servers": mirror.src.bootstrap})
    entry = ConfigEntry("retention.ms", changed, incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs([ConfigResource("topic", "orders",
                                                                  incremental_configs=[entry])]).values():
        future.result(timeout=30)
    mirror.mm2.await_(lambda: retention() == changed, f"retention.ms={changed} on src.orders")


def test_group_offsets_translated(mirror: Mirror) -> None:
    """The group committed on src at each partition's end: ``src.checkpoints.internal`` on dst holds
    a checkpoint per partition translating it to the end of ``src.orders`` (RemoteClusterUtils'
    translateOffsets reads these), and sync.group.offsets commits that offset for the group on dst."""
    want = {(GROUP, "src.orders", p): Checkpoint(GROUP, "src.orders", p, PER_PARTITION, PER_PARTITION)
            for p in range(PARTITIONS)}

    def checkpointed() -> bool:
        latest = latest_checkpoints(mirror.dst.bootstrap, "src.checkpoints.internal")
        return all(latest.get(k) == v for k, v in want.items())

    mirror.mm2.await_(checkpointed, f"checkpoints of {GROUP} at {PER_PARTITION} in src.checkpoints.internal")
    mirror.mm2.await_(lambda: committed(mirror.dst.bootstrap, GROUP, "src.orders", PARTITIONS)
                      == [PER_PARTITION] * PARTITIONS, f"{GROUP}'s offsets on dst at {PER_PARTITION}")


# MirrorMaker's own topics, on the cluster each lives on; each one compacted (MM2 and Connect create
# them with cleanup.policy=compact). mm2-configs must have one partition (Connect checks).
INTERNAL = {
    "dst": ("heartbeats", "src.heartbeats", "src.checkpoints.internal",
            "mm2-configs.src.internal", "mm2-offsets.src.internal", "mm2-status.src.internal"),
    "src": ("mm2-offset-syncs.dst.internal",),
}


def has_topics(bootstrap: str, names: tuple[str, ...]) -> bool:
    return set(names) <= set(topics(bootstrap))


def test_internal_topics_created_and_compacted(mirror: Mirror) -> None:
    for side, names in INTERNAL.items():
        bootstrap = getattr(mirror, side).bootstrap
        mirror.mm2.await_(partial(has_topics, bootstrap, names), f"{names} on {side}")
        configs = topic_configs(bootstrap, list(names), ("cleanup.policy",))
        assert {t: c["cleanup.policy"] for t, c in configs.items()} == dict.fromkeys(names, "compact")
    assert topics(mirror.dst.bootstrap)["mm2-configs.src.internal"] == 1
    print_broker_load(mirror)


def print_broker_load(mirror: Mirror, window: float = 10.0) -> None:
    """What each broker spends while MirrorMaker idles (heartbeats, checkpoints, syncs every second):
    CPU share and requests per second over ``window`` (printed, not asserted: a busy loop would show)."""
    nodes = {"src": mirror.src, "dst": mirror.dst}
    before = {n: (cpu_seconds(v.pid), requests_total(v.metrics_url)) for n, v in nodes.items()}
    time.sleep(window)  # a measurement window, not a wait for a condition
    for name, node in nodes.items():
        cpu = (cpu_seconds(node.pid) - before[name][0]) / window
        requests = requests_total(node.metrics_url)
        rate = "n/a" if requests is None else f"{(requests - (before[name][1] or 0)) / window:.1f}/s"
        print(f"{name} broker while MirrorMaker runs: CPU {cpu:.1%}, requests {rate}")
