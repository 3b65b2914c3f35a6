"""Client quotas: Kafka's rate measurement and throttle formula, the precedence of quota entities,
the admin APIs' checks and filters, and throttling on the wire (KIP-219: the answer first, carrying
throttle_time_ms and, for a Fetch, no data; then nothing read from that connection meanwhile)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from grete.broker.config import BrokerConfig
from grete.broker.quotas.client_quotas import FETCH_RATE, PRODUCE_RATE, ClientQuotas, Rate
from grete.coordinator.kraft.local import open_local_store
from grete.coordinator.metadata import quota_entity
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
    FetchRequest,
    FetchResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from grete.testing._wire import Wire
from grete.testing.inprocess import RunningBroker

# --- the measurement ---------------------------------------------------------------------------


def test_young_rate_counts_the_whole_window() -> None:
    # 11 samples of 1 s: a sensor's span is at least 10 s, so 5000 bytes at once read as 500 B/s.
    rate = Rate(11, 1000, 0.0)
    rate.record(5000, 0.0)
    assert rate.per_second(0.0) == pytest.approx(500.0)
    rate.record(5000, 12_500.0)  # later than the whole window: the first sample no longer counts
    assert rate.per_second(12_500.0) == pytest.approx(500.0)


def test_throttle_time_brings_the_rate_back_to_the_quota(tmp_path: Path) -> None:
    quotas = _quotas(tmp_path, {("client-id", "c")}, PRODUCE_RATE, 1000.0)
    assert quotas.record(PRODUCE_RATE, "ANONYMOUS", "c", 10_000, 0.0) == 0  # exactly at 1000 B/s
    # 20000 bytes over a 10 s span: O = 2000, T = 1000, X = (O - T) / T * W = 10 s.
    assert quotas.record(PRODUCE_RATE, "ANONYMOUS", "c", 10_000, 0.0) == 10_000
    assert quotas.record(PRODUCE_RATE, "ANONYMOUS", "other", 10**9, 0.0) == 0  # no quota applies


def _quotas(tmp_path: Path, entity: set[tuple[str, str | None]], key: str, value: float) -> ClientQuotas:
    store = open_local_store(tmp_path, 1)
    asyncio.run(store.alter_client_quotas(quota_entity(dict(entity)), {key: value}))
    return ClientQuotas(BrokerConfig({}), store)


def test_most_specific_entity_wins(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, 1)
    quotas = ClientQuotas(BrokerConfig({}), store)
    levels: list[dict[str, str | None]] = [
        {"client-id": None}, {"client-id": "c"}, {"user": None}, {"user": None, "client-id": None},
        {"user": None, "client-id": "c"}, {"user": "alice"}, {"user": "alice", "client-id": None},
        {"user": "alice", "client-id": "c"}]
    # Added from the least to the most specific: each one takes over from the one before.
    for rank, entity in enumerate(levels, 1):
        asyncio.run(store.alter_client_quotas(quota_entity(entity), {FETCH_RATE: float(rank)}))
        assert quotas.limit(FETCH_RATE, "alice", "c") == rank, entity
    # Other users and clients fall through to the defaults.
    assert quotas.limit(FETCH_RATE, "bob", "c") == 5  # <default> user with client c
    assert quotas.limit(FETCH_RATE, "bob", "d") == 4  # <default> user, <default> client
    assert quotas.limit(PRODUCE_RATE, "alice", "c") is None
    # The default's sensor is the user's own (Kafka's metric tags), not one shared by all users.
    found = quotas.match(FETCH_RATE, "bob", "d")
    assert found is not None and (found.user_tag, found.client_tag) == ("bob", "d")


def test_quotas_survive_a_restart_of_the_store(tmp_path: Path) -> None:
    store = open_local_store(tmp_path, 1)
    entity = quota_entity({"user": "alice", "client-id": None})
    asyncio.run(store.alter_client_quotas(entity, {PRODUCE_RATE: 2048.0, "request_percentage": 12.5}))
    assert open_local_store(tmp_path, 1).client_quotas() == {entity: {PRODUCE_RATE: 2048.0,
                                                                     "request_percentage": 12.5}}
    asyncio.run(store.alter_client_quotas(entity, {PRODUCE_RATE: None, "request_percentage": None}))
    assert open_local_store(tmp_path, 1).client_quotas() == {}


# --- the admin APIs on the wire ----------------------------------------------------------------


def connect(broker: RunningBroker, client_id: str = "quota-test") -> Wire:
    return Wire(broker.host, broker.port, 20, client_id)


def alter(conn: Wire, entity: dict[str, str | None], ops: dict[str, float | None],
          validate_only: bool = False) -> Any:
    request = AlterClientQuotasRequest(validate_only=validate_only, entries=[AlterClientQuotasRequest.EntryData(
        entity=[AlterClientQuotasRequest.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
        ops=[AlterClientQuotasRequest.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
             for k, v in ops.items()])])
    return conn.call(request, AlterClientQuotasResponse, 1).entries[0]


def describe(conn: Wire, components: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
    return conn.call(DescribeClientQuotasRequest(strict=strict, components=[
        DescribeClientQuotasRequest.ComponentData(entity_type=t, match_type=m, match=n)
        for t, m, n in components]), DescribeClientQuotasResponse, 1)


def entities(response: Any) -> set[tuple[tuple[str, str | None], ...]]:
    assert response.error_code == 0, response.error_message
    return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)) for entry in response.entries}


def test_alter_checks_as_kafka(grete_broker: RunningBroker) -> None:
    conn = connect(grete_broker)
    try:
        cases: list[tuple[dict[str, str | None], dict[str, float | None], str]] = [
            ({}, {PRODUCE_RATE: 1.0}, "Invalid empty client quota entity"),
            ({"client-id": "c"}, {PRODUCE_RATE: 10.5}, "producer_byte_rate cannot be a fractional value."),
            ({"client-id": "c"}, {PRODUCE_RATE: 0.0}, "Quota producer_byte_rate must be greater than 0"),
            ({"client-id": "c"}, {"connection_creation_rate": 1.0}, "Invalid configuration key connection_creation_rate"),
            ({"ip": "10.0.0.1", "user": "u"}, {"connection_creation_rate": 1.0}, "Invalid quota entity combination"),
            ({"ip": "not an address"}, {"connection_creation_rate": 1.0}, "is not a valid IP or resolvable host"),
            ({"group": "g"}, {PRODUCE_RATE: 1.0}, "Unhandled client quota entity type: group"),
            ({"user": ""}, {PRODUCE_RATE: 1.0}, "Empty user not supported"),
        ]
        for entity, ops, message in cases:
            result = alter(conn, entity, ops)
            assert result.error_code == ErrorCode.INVALID_REQUEST, (entity, ops)
            assert message in (result.error_message or ""), (result.error_message, message)
        assert alter(conn, {"client-id": "c"}, {PRODUCE_RATE: 1024.0}, validate_only=True).error_code == 0
        assert entities(describe(conn, [])) == set()  # validate_only changed nothing, nor did the refusals
    finally:
        conn.close()


def test_describe_filters(grete_broker: RunningBroker) -> None:
    conn = connect(grete_broker)
    try:
        stored: list[dict[str, str | None]] = [{"user": "alice"}, {"user": None}, {"client-id": "c"},
                                               {"user": "alice", "client-id": "c"}, {"ip": "10.0.0.1"}]
        for entity in stored:
            key = "connection_creation_rate" if "ip" in entity else PRODUCE_RATE
            assert alter(conn, entity, {key: 100.0}).error_code == 0
        alice = (("user", "alice"),)
        pair = (("client-id", "c"), ("user", "alice"))
        assert entities(describe(conn, [("user", 0, "alice")])) == {alice, pair}
        assert entities(describe(conn, [("user", 0, "alice")], strict=True)) == {alice}
        assert entities(describe(conn, [("user", 1, None)])) == {(("user", None),)}
        assert entities(describe(conn, [("user", 2, None), ("client-id", 2, None)])) == {pair}
        assert entities(describe(conn, [("ip", 2, None)])) == {(("ip", "10.0.0.1"),)}
        assert len(entities(describe(conn, []))) == 5
        bad = describe(conn, [("user", 0, "a"), ("user", 2, None)])
        assert bad.error_code == ErrorCode.INVALID_REQUEST and "more than once" in bad.error_message
        assert describe(conn, [("ip", 2, None), ("user", 2, None)]).error_code == ErrorCode.INVALID_REQUEST
        assert describe(conn, [("group", 2, None)]).error_code == ErrorCode.UNSUPPORTED_VERSION
        values = describe(conn, [("client-id", 0, "c")], strict=True).entries[0].values
        assert [(v.key, v.value) for v in values] == [(PRODUCE_RATE, 100.0)]
    finally:
        conn.close()


# --- throttling on the wire ----------------------------------------------------------------------


def fetch_request(topic: str) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                            FetchRequest.FetchPartition(partition=0, fetch_offset=0, log_start_offset=-1,
                                                        partition_max_bytes=1 << 20)])])


def test_throttled_fetch_answers_empty_then_mutes(grete_broker: RunningBroker, grete_topic: str) -> None:
    producer = Producer({"bootstrap.servers": grete_broker.bootstrap_servers, "linger.ms": 50})
    for _ in range(50):
        producer.produce(grete_topic, b"x" * 1000)
    assert producer.flush(10) == 0
    free = connect(grete_broker, "unthrottled")
    size = len(free.call(fetch_request(grete_topic), FetchResponse, 11).responses[0].partitions[0].records)
    free.close()
    assert size > 40_000
    admin = connect(grete_broker)
    # The fetch reads as size/10 B/s (a young sensor spans 10 s): just over this quota, throttled
    # for about 1 s.
    assert alter(admin, {"client-id": "slow"}, {"consumer_byte_rate": float(size // 11)}).error_code == 0
    admin.close()
    slow = connect(grete_broker, "slow")
    try:
        first = slow.call(fetch_request(grete_topic), FetchResponse, 11)
        assert 900 <= first.throttle_time_ms <= 1100, first.throttle_time_ms
        assert first.responses == []  # Kafka's throttled Fetch carries no data
        # Muted: the next request is read only once the throttle time has passed.
        asked = time.monotonic()
        slow.send(fetch_request(grete_topic), 11)
        slow.receive(FetchResponse, 11)
        assert time.monotonic() - asked >= first.throttle_time_ms / 1000 - 0.1
    finally:
        slow.close()


def test_a_share_fetch_counts_against_the_consumer_byte_rate(grete_broker: RunningBroker, grete_topic: str) -> None:
    """ShareFetch is measured against consumer_byte_rate, as Fetch is. Kafka answers a throttled
    ShareFetch empty, its acquired records left locked until they time out; grete delivers them and
    throttles the next request."""
    producer = Producer({"bootstrap.servers": grete_broker.bootstrap_servers, "linger.ms": 50})
    for _ in range(50):
        producer.produce(grete_topic, b"x" * 1000)
    assert producer.flush(10) == 0
    admin = connect(grete_broker)
    configs = admin.call(IncrementalAlterConfigsRequest(resources=[IncrementalAlterConfigsRequest.AlterConfigsResource(
        resource_type=32, resource_name="sg", configs=[IncrementalAlterConfigsRequest.AlterableConfig(
            name="share.auto.offset.reset", config_operation=0, value="earliest")])]), IncrementalAlterConfigsResponse, 1)
    assert configs.responses[0].error_code == 0, configs.responses[0]
    assert alter(admin, {"client-id": "slow-share"}, {"consumer_byte_rate": 2000.0}).error_code == 0
    admin.close()
    slow = connect(grete_broker, "slow-share")
    try:
        joined = slow.call(ShareGroupHeartbeatRequest(group_id="sg", member_id="m-slow", member_epoch=0,
                                                      subscribed_topic_names=[grete_topic]), ShareGroupHeartbeatResponse, 1)
        assert joined.error_code == 0, joined.error_message
        (assigned,) = joined.assignment.topic_partitions
        deadline = time.monotonic() + 20
        for epoch in range(1000):
            request = ShareFetchRequest(group_id="sg", member_id="m-slow", share_session_epoch=epoch, max_wait_ms=500,
                                        min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, topics=[
                                            ShareFetchRequest.FetchTopic(topic_id=assigned.topic_id, partitions=[
                                                ShareFetchRequest.FetchPartition(partition_index=0)])] if epoch == 0 else [])
            answer = slow.call(request, ShareFetchResponse, 2)
            assert answer.error_code == 0, answer.error_message
            records = [a for t in answer.responses for p in t.partitions for a in p.acquired_records]
            if records or time.monotonic() > deadline:
                break
        assert records and answer.throttle_time_ms > 0, (records, answer.throttle_time_ms)
    finally:
        slow.close()
