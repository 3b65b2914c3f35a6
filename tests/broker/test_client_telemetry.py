"""ClientTelemetry's clock-driven rules (the wire behaviour is compat-tests/wire/test_wire_telemetry.py,
checked against Kafka 4.3.1): throttling ends after the push interval, idle instances expire, the
cache is bounded."""

from __future__ import annotations

import uuid

import pytest

from grete.broker.metrics import client_telemetry
from grete.broker.metrics.client_telemetry import PUSH_INTERVAL_MS, ClientTelemetry
from grete.protocol.errors import ErrorCode, KafkaError


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    now = [1_000_000_000]
    monkeypatch.setattr(client_telemetry, "_now_ms", lambda: now[0])
    return now


def test_throttling_ends_after_the_push_interval(clock: list[int]) -> None:
    telemetry = ClientTelemetry()
    instance, state = telemetry.get_subscription(1, uuid.UUID(int=0))
    with pytest.raises(KafkaError) as refused:
        telemetry.get_subscription(1, instance)
    assert refused.value.code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    telemetry.push(1, instance, state.subscription_id, False, 4, 0, 100)
    clock[0] += PUSH_INTERVAL_MS - 1
    with pytest.raises(KafkaError):
        telemetry.push(1, instance, state.subscription_id, False, 4, 0, 100)
    clock[0] += 1
    telemetry.push(1, instance, state.subscription_id, False, 4, 0, 100)
    clock[0] += PUSH_INTERVAL_MS
    assert telemetry.get_subscription(1, instance)[0] == instance


def test_idle_instances_expire_and_the_cache_is_bounded(clock: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    telemetry = ClientTelemetry()
    instance, _ = telemetry.get_subscription(1, uuid.UUID(int=0))
    clock[0] += 3 * PUSH_INTERVAL_MS  # Kafka's expiry: max(60 s, three push intervals)
    other, _ = telemetry.get_subscription(2, uuid.UUID(int=0))
    assert instance not in telemetry._instances and other in telemetry._instances
    monkeypatch.setattr(client_telemetry, "CACHE_MAX_SIZE", 3)
    ids = [telemetry.get_subscription(10 + i, uuid.UUID(int=0))[0] for i in range(5)]
    assert list(telemetry._instances) == ids[-3:]
    assert set(telemetry._by_connection.values()) == set(ids[-3:])
    telemetry.connection_closed(14)
    assert list(telemetry._instances) == ids[-3:-1]
