"""Client telemetry (KIP-714) on a broker without client-metrics subscriptions: Kafka 4.3.1 answers
GetTelemetrySubscriptions and PushTelemetry without advertising them. The same raw requests against
Kafka 4.3.1 and grete; Kafka's answers required of grete. One connection per scenario: a client
instance lives as long as the connection that created it."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.broker.metrics.client_telemetry import subscription_id  # noqa: E402
from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    ApiVersionsRequest,
    ApiVersionsResponse,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from grete.testing._wire import Wire  # noqa: E402

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="Kafka 4.3's telemetry answers")
ZSTD, GZIP = 4, 1


@pytest.fixture
def connect(broker):
    opened: list[Wire] = []
    host, port = broker.address

    def new() -> Wire:
        opened.append(Wire(host, int(port), timeout=30))
        return opened[-1]
    yield new
    for w in opened:
        w.close()


def get(wire: Wire, instance: uuid.UUID) -> GetTelemetrySubscriptionsResponse:
    return wire.call(GetTelemetrySubscriptionsRequest(client_instance_id=instance), GetTelemetrySubscriptionsResponse, 0)


def push(wire: Wire, instance: uuid.UUID, subscription: int, terminating: bool = False,
         compression: int = ZSTD, metrics: bytes = b"") -> int:
    return wire.call(PushTelemetryRequest(client_instance_id=instance, subscription_id=subscription,
                                          terminating=terminating, compression_type=compression, metrics=metrics),
                     PushTelemetryResponse, 0).error_code


def test_not_advertised(connect):
    keys = {k.api_key for k in connect().call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                              ApiVersionsResponse, 3).api_keys}
    assert not keys & {71, 72}


def test_subscription_then_pushes(connect):
    wire = connect()
    first = get(wire, uuid.UUID(int=0))
    assert first.error_code == 0 and first.client_instance_id.int != 0
    assert first.subscription_id == subscription_id(first.client_instance_id)  # Kafka's CRC32C ^ hashCode
    assert (first.accepted_compression_types, first.push_interval_ms, first.telemetry_max_bytes,
            first.delta_temporality, first.requested_metrics) == ([4, 3, 1, 2], 300_000, 1_048_576, True, [])
    instance, sub = first.client_instance_id, first.subscription_id
    assert get(wire, instance).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # within the push interval
    assert push(wire, instance, sub) == 0  # the first push after a Get is early but welcome
    assert push(wire, instance, sub, metrics=b"x" * 10) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert push(wire, instance, sub + 1, terminating=True) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert push(wire, instance, sub, terminating=True) == ErrorCode.INVALID_REQUEST  # after a terminating one


def test_push_errors(connect):
    wire = connect()
    assert push(wire, uuid.UUID(int=0), 0) == ErrorCode.INVALID_REQUEST
    stranger = uuid.uuid4()
    assert push(wire, stranger, 5) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    answer = get(wire, stranger)  # allowed at once after UNKNOWN_SUBSCRIPTION_ID, with the id kept
    assert (answer.error_code, answer.client_instance_id) == (0, stranger)
    other = uuid.uuid4()
    assert push(wire, other, subscription_id(other), compression=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    big = uuid.uuid4()
    assert push(wire, big, subscription_id(big), compression=GZIP,
                metrics=b"m" * (1_048_576 + 1)) == ErrorCode.TELEMETRY_TOO_LARGE


def test_instance_ends_with_its_connection(connect):
    wire = connect()
    instance = get(wire, uuid.UUID(int=0)).client_instance_id
    assert get(wire, instance).error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    wire.close()
    deadline = time.monotonic() + 10  # Kafka forgets it when its network thread sees the close
    while (code := get(connect(), instance).error_code) != 0:
        assert code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and time.monotonic() < deadline
        time.sleep(0.1)
