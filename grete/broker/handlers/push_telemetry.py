"""PushTelemetry (72): v0, checked as Kafka 4.3.1 checks a push (grete/broker/metrics/client_telemetry.py)
and then dropped: with no client-metrics subscriptions there is no exporter to hand metrics to.
Not advertised, as on Kafka 4.3.1 without a telemetry reporter."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.protocol.errors import KafkaError
from grete.protocol.messages import ApiKey, PushTelemetryRequest, PushTelemetryResponse


@api(ApiKey.PUSH_TELEMETRY, 0, 0)
def handle(ctx: RequestContext[Admin], request: PushTelemetryRequest) -> PushTelemetryResponse:
    try:
        ctx.broker.client_telemetry.push(id(ctx.session), request.client_instance_id, request.subscription_id,
                                         request.terminating, request.compression_type, len(request.metrics),
                                         ctx.broker.config.get_int("telemetry.max.bytes"))
    except KafkaError as exc:
        return PushTelemetryResponse(error_code=exc.code)
    return PushTelemetryResponse(error_code=0)
