"""sarama against a 3-broker cluster: producing with acks=all and idempotence while the
leader of a partition is stopped (SIGTERM, a controlled shutdown) mid-run; every acknowledged record
is read back exactly once. grete's cluster by default, Kafka 3.9.2 in ZooKeeper mode with
--target=kafka-3.9 (tools/cluster_scenario.py)."""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from tools.cluster_scenario import stop_a_leader_mid_run, three_brokers

pytestmark = pytest.mark.slow


# The producer retries as Kafka's own does (retries until delivered, 100 ms backoff doubling to 1 s),
# not sarama's default of 3 retries 100 ms apart: when the stopped broker is also the controller,
# the leaderships it moved reach clients only after the next controller is elected, which takes
# longer than 300 ms on a loaded machine, on Kafka as on grete. 10 retries: 7 to 8 s.
RETRIES = 10


def test_sarama_survives_a_stopped_leader(sarama_program, target: str) -> None:
    with three_brokers(target) as running:
        acked, read = stop_a_leader_mid_run(running, sarama_program, f"sarama-cluster-{uuid.uuid4().hex[:8]}", 50000,
                                            retries=RETRIES)
    assert len(acked) == 50000
    duplicates = [v for v, n in Counter(read).items() if n > 1]
    assert not duplicates, duplicates[:5]
    assert sorted(read) == sorted(acked)
