"""UnregisterBroker (64): v0, KRaft's decommissioning of a broker (``kafka-cluster unregister --id N``,
Admin.unregisterBroker). A KRaft broker forwards it to the active controller, as Kafka's brokers do;
the controller moves the broker's leaderships and ISR memberships away and removes its registration
in one batch (BROKER_ID_NOT_REGISTERED for an id it does not know). ALTER on the cluster is
required. A ZooKeeper-mode broker does not serve it, as Kafka 3.9's do not.
"""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, UnregisterBrokerRequest, UnregisterBrokerResponse


@api(ApiKey.UNREGISTER_BROKER, 0, 0)
async def handle(ctx: RequestContext[ClusterControl], request: UnregisterBrokerRequest) -> Message:
    if not cluster_allowed(ctx, Op.ALTER):
        return UnregisterBrokerResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    forwarded = await ctx.broker.cluster.forwarded(request, ctx.version)  # a KRaft broker's controller answers
    if isinstance(forwarded, UnregisterBrokerResponse):
        return forwarded
    try:
        await ctx.broker.cluster.unregister_broker(request.broker_id)
    except KafkaError as exc:
        return UnregisterBrokerResponse(error_code=exc.code, error_message=exc.message)
    return UnregisterBrokerResponse()
