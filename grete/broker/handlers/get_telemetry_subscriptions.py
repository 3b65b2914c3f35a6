"""GetTelemetrySubscriptions (71): v0, answered as Kafka 4.3.1 answers it without client-metrics
subscriptions (grete/broker/metrics/client_telemetry.py): the default subscription, no metrics requested.
Not advertised in ApiVersions, as Kafka 4.3.1 does not advertise it without a telemetry reporter,
so stock clients do not ask; one that asks anyway gets Kafka's answer."""

from __future__ import annotations

from grete.broker.metrics.client_telemetry import ACCEPTED_COMPRESSION_TYPES, PUSH_INTERVAL_MS
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.protocol.errors import KafkaError
from grete.protocol.messages import (
    ApiKey,
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
)


@api(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
def handle(ctx: RequestContext[Admin], request: GetTelemetrySubscriptionsRequest) -> GetTelemetrySubscriptionsResponse:
    try:
        instance_id, instance = ctx.broker.client_telemetry.get_subscription(id(ctx.session),
                                                                             request.client_instance_id)
    except KafkaError as exc:
        return GetTelemetrySubscriptionsResponse(error_code=exc.code)
    return GetTelemetrySubscriptionsResponse(
        error_code=0, client_instance_id=instance_id, subscription_id=instance.subscription_id,
        accepted_compression_types=list(ACCEPTED_COMPRESSION_TYPES), push_interval_ms=PUSH_INTERVAL_MS,
        telemetry_max_bytes=ctx.broker.config.get_int("telemetry.max.bytes"), delta_temporality=True,
        requested_metrics=[])
