"""KafkaJS admin: createTopics, fetchTopicMetadata, describeConfigs, listGroups, deleteTopics."""

from __future__ import annotations

import uuid


def test_kafkajs_admin(kafkajs, make_topic):
    source = make_topic(partitions=1)
    group = f"kja-{uuid.uuid4().hex[:8]}"
    kafkajs.ok("produce", topic=source, count=1)
    kafkajs.ok("consume", topic=source, count=1, group=group)

    topic = f"kj-admin-{uuid.uuid4().hex[:8]}"
    steps = {x["step"]: x for x in kafkajs.ok("admin", topic=topic, group=group)}
    assert steps["create"]["created"] is True
    assert steps["create-again"]["created"] is False  # TOPIC_ALREADY_EXISTS, which KafkaJS swallows
    assert steps["describe"]["partitions"] == [0, 1, 2]
    # Config sources as numbers: 1 = DYNAMIC_TOPIC_CONFIG, 5 = DEFAULT_CONFIG.
    assert steps["describe-configs"]["configs"] == {
        "retention.ms": {"value": "3600000", "source": 1, "default": False},
        "cleanup.policy": {"value": "delete", "source": 5, "default": True}}
    assert steps["list-groups"] == {"step": "list-groups", "has_group": True, "protocol_type": "consumer"}
    assert steps["delete"]["topic"] == topic
    assert steps["delete-again"]["error_code"] == 3, steps["delete-again"]  # UNKNOWN_TOPIC_OR_PARTITION
