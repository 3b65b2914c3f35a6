"""ListConfigResources (74): v0-1, the resources DescribeConfigs can describe (KIP-1142).

v0 is KIP-714's ListClientMetricsResources: the client-metrics subscriptions
(grete/broker/metrics/client_metrics_configs.py). v1 takes resource types; an empty list means all of
them. As Kafka 4.3.1 answers (measured): TOPIC lists every topic, internal ones too; BROKER and
BROKER_LOGGER the live brokers with an endpoint on the request's listener; GROUP the groups with
config overrides (not every group); CLIENT_METRICS the subscriptions. Types come in Kafka's fixed order (GROUP,
CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC) whatever the request's order, each once. Any other type
fails the request with UNSUPPORTED_VERSION. The principal needs DESCRIBE_CONFIGS on the cluster
(KIP-1142), else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from grete.broker.handlers.describe_configs import BROKER, BROKER_LOGGER, GROUP, TOPIC
from grete.broker.metrics.client_metrics_configs import CLIENT_METRICS
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Admin
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, ListConfigResourcesRequest, ListConfigResourcesResponse

ALL_TYPES = (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)  # Kafka's answer order
Resource = ListConfigResourcesResponse.ConfigResource


@api(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
def handle(ctx: RequestContext[Admin], request: ListConfigResourcesRequest) -> ListConfigResourcesResponse:
    if not cluster_allowed(ctx, Op.DESCRIBE_CONFIGS):
        return ListConfigResourcesResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if ctx.version == 0:
        return ListConfigResourcesResponse(error_code=0, config_resources=[
            Resource(resource_name=name, resource_type=CLIENT_METRICS) for name in ctx.broker.metadata.client_metrics_names()])
    wanted = set(request.resource_types) or set(ALL_TYPES)
    if not wanted <= set(ALL_TYPES):
        return ListConfigResourcesResponse(error_code=ErrorCode.UNSUPPORTED_VERSION)
    resources: list[Resource] = []
    for resource_type in ALL_TYPES:
        if resource_type in wanted:
            resources += [Resource(resource_name=name, resource_type=resource_type)
                          for name in _names(ctx, resource_type)]
    return ListConfigResourcesResponse(error_code=0, config_resources=resources)


def _names(ctx: RequestContext[Admin], resource_type: int) -> list[str]:
    broker = ctx.broker
    if resource_type == TOPIC:
        return sorted(broker.metadata.topics())
    if resource_type in (BROKER, BROKER_LOGGER):
        return [str(info.id) for info in sorted(broker.live_brokers(), key=lambda b: b.id)
                if info.endpoint(ctx.listener) is not None]
    if resource_type == GROUP:
        return broker.metadata.configured_groups()
    if resource_type == CLIENT_METRICS:
        return broker.metadata.client_metrics_names()
    return []
