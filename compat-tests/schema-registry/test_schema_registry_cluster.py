"""Apicurio Registry 3.3.3 with kafkasql storage on compat-tests/cluster's 3-broker cluster (grete's
by default; Kafka 3.9.2 in ZooKeeper mode with ``--target=kafka-3.9``): the register / evolve /
restart / read-back scenario of test_schema_registry.py on the fresh cluster, then fresh starts that
each bring their own new journal and snapshot topics (created by the registry, then subscribed to by a
new group at once, whichever brokers lead them and coordinate the group). ``-s`` prints the timings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from apicurio_registry import V1, Registry, evolve_restart_read_back, summary

pytestmark = [pytest.mark.long, pytest.mark.timeout(1800)]

FRESH_TOPIC_STARTS = 3


def test_register_evolve_restart_on_three_brokers(cluster_target: Any,
                                                  make_registry: Callable[..., Registry]) -> None:
    registry = make_registry(cluster_target.bootstrap)
    evolve_restart_read_back(registry, "orders-value")
    print(summary(f"{cluster_target.name} cluster, register, evolve, restart", registry.starts))


def test_fresh_journal_topics_on_three_brokers(cluster_target: Any, make_registry: Callable[..., Registry]) -> None:
    for n in range(FRESH_TOPIC_STARTS):
        topics = {"apicurio.kafkasql.topic": f"journal-{n}", "apicurio.kafkasql.snapshots.topic": f"snapshots-{n}",
                  "apicurio.events.kafka.topic": f"events-{n}"}
        registry = make_registry(cluster_target.bootstrap, topics)
        registry.start()
        status, body = registry.register("orders-value", V1)
        assert (status, registry.get("/subjects")) == (200, ["orders-value"]), f"start {n}: {status} {body}"
        registry.stop()
        print(summary(f"{cluster_target.name} cluster, fresh topics journal-{n}", registry.starts))
