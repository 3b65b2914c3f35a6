"""kafka-go's Client admin calls: CreateTopics, Metadata, DescribeConfigs, ListGroups, DeleteTopics."""

from __future__ import annotations

import uuid


def test_kafkago_admin(kafkago, make_topic):
    source = make_topic(partitions=1)
    group = f"kga-{uuid.uuid4().hex[:8]}"
    kafkago.ok("produce", topic=source, count=1)
    kafkago.ok("consume", topic=source, count=1, group=group)

    topic = f"kg-admin-{uuid.uuid4().hex[:8]}"
    steps = {x["step"]: x for x in kafkago.ok("admin", topic=topic, group=group)}
    assert steps["create"]["error_code"] == 0
    assert steps["create-again"]["error_code"] == 36  # TOPIC_ALREADY_EXISTS
    assert steps["describe"]["partitions"] == [0, 1, 2]
    configs = steps["describe-configs"]["configs"]
    # Config sources as numbers: 1 = DYNAMIC_TOPIC_CONFIG, 5 = DEFAULT_CONFIG.
    assert configs == {"retention.ms": {"value": "3600000", "source": 1},
                       "cleanup.policy": {"value": "delete", "source": 5}}
    assert steps["list-groups"] == {"step": "list-groups", "has_group": True, "protocol_type": "consumer"}
    assert steps["delete"]["error_code"] == 0
    assert steps["delete-again"]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
