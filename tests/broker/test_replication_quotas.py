"""The follower's replication throttle (KIP-73): which partitions a topic config throttles on this
broker, and when the measured rate holds them back."""

from __future__ import annotations

from grete.broker.config import BrokerConfig
from grete.broker.quotas.replication_quotas import (
    ALL,
    ReplicationQuota,
    alter_log_dirs_quota,
    throttled_partitions,
)


def test_throttled_replicas_name_partitions_of_this_broker() -> None:
    assert throttled_partitions("0:1,0:2, 1:2 ,3:3", 2) == {0, 1}
    assert throttled_partitions("*", 5) is ALL
    assert throttled_partitions("", 1) == frozenset()
    assert throttled_partitions("x:1,2:y,4:1", 1) == {4}


def test_the_quota_holds_back_once_the_rate_is_exceeded() -> None:
    configs = {"t": {"follower.replication.throttled.replicas": "0:2"}, "u": {}}
    quota = ReplicationQuota(2, BrokerConfig({"node.id": "2", "follower.replication.throttled.rate": "1000"}),
                             configs.get, "follower")
    assert quota.throttled("t", 0) and not quota.throttled("t", 1) and not quota.throttled("u", 0)
    assert not quota.throttled("gone", 0)
    assert not quota.exceeded(0)
    quota.record(5_000, 0)  # measured over the 11 windows' span: 500 B/s
    assert not quota.exceeded(100)
    quota.record(10_000, 200)  # 1,500 B/s
    assert quota.exceeded(300)
    assert not quota.exceeded(60_000)  # the windows have passed


def test_an_unlimited_rate_never_holds_back() -> None:
    quota = ReplicationQuota(1, BrokerConfig({"node.id": "1"}), lambda _topic: {}, "leader")
    quota.record(10**12, 0)
    assert not quota.exceeded(1)


def test_moves_between_log_dirs_have_a_quota_of_their_own() -> None:
    quota = alter_log_dirs_quota(BrokerConfig({"node.id": "1",
                                               "replica.alter.log.dirs.io.max.bytes.per.second": "100"}))
    quota.record(500, 0)
    assert not quota.exceeded(1)  # 50 B/s over the windows' span
    quota.record(1_000, 2)
    assert quota.exceeded(3)
