"""franz-go's admin client (kadm): create, describe, describe configs, list groups, delete."""

from __future__ import annotations

import uuid


def test_franzgo_admin(franzgo, make_topic):
    # A group that exists, for ListGroups.
    source = make_topic(partitions=1)
    group = f"fga-{uuid.uuid4().hex[:8]}"
    franzgo.ok("produce", topic=source, count=1)
    franzgo.ok("consume", topic=source, count=1, group=group)

    topic = f"fg-admin-{uuid.uuid4().hex[:8]}"
    steps = {x["step"]: x for x in franzgo.ok("admin", topic=topic, group=group)}
    assert steps["create"] == {"step": "create", "topic": topic, "partitions": 3}
    assert steps["create-again"]["error_code"] == 36  # TOPIC_ALREADY_EXISTS
    assert steps["describe"]["partitions"] == [0, 1, 2]
    configs = steps["describe-configs"]["configs"]
    assert configs["retention.ms"] == {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"}
    assert configs["cleanup.policy"] == {"value": "delete", "source": "DEFAULT_CONFIG"}
    assert steps["list-groups"]["has_group"] is True
    assert steps["delete"]["topic"] == topic
    assert steps["delete-again"]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
