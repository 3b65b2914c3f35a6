"""sarama's ClusterAdmin: create, describe, describe configs, list groups, delete."""

from __future__ import annotations

import uuid


def test_sarama_admin(sarama_client, make_topic):
    # A group that exists, for ListConsumerGroups.
    source = make_topic(partitions=1)
    group = f"sra-{uuid.uuid4().hex[:8]}"
    sarama_client.ok("produce", topic=source, count=1)
    sarama_client.ok("consume", topic=source, count=1, group=group)

    topic = f"sr-admin-{uuid.uuid4().hex[:8]}"
    steps = {x["step"]: x for x in sarama_client.ok("admin", topic=topic, group=group)}
    assert steps["create"] == {"step": "create", "topic": topic}
    assert steps["create-again"]["error_code"] == 36  # TOPIC_ALREADY_EXISTS
    assert steps["describe"]["partitions"] == [0, 1, 2]
    configs = steps["describe-configs"]["configs"]
    # sarama's names for DYNAMIC_TOPIC_CONFIG and DEFAULT_CONFIG.
    assert configs["retention.ms"] == {"value": "3600000", "source": "Topic", "default": False}
    assert configs["cleanup.policy"] == {"value": "delete", "source": "Default", "default": True}
    assert steps["list-groups"] == {"step": "list-groups", "has_group": True, "protocol_type": "consumer"}
    assert steps["delete"]["topic"] == topic
    assert steps["delete-again"]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
