"""BrokerHeartbeat (63): v0-2, a KRaft broker to the active controller of its quorum.

Served only by a controller of a quorum of several voters (grete/broker/quorum/brokers.py); every
other node closes the connection, as a Kafka broker listener does. A voter that does not lead
answers NOT_CONTROLLER, as Kafka's controllers do.
"""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.protocol.messages import ApiKey, BrokerHeartbeatRequest, BrokerHeartbeatResponse


@api(ApiKey.BROKER_HEARTBEAT, 0, 2)
async def handle(ctx: RequestContext[ClusterControl], request: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
    registry = ctx.broker.kraft_brokers
    assert registry is not None  # the connection refuses the API without one
    return await registry.heartbeat(request)
