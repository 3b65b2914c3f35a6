"""AssignReplicasToDirs (73): v0, a KRaft broker telling the active controller which of its log
dirs holds each replica it placed (KIP-858; grete/broker/quorum/dir_assignments.py).

Served only by a controller of a quorum of several voters, as BrokerHeartbeat is; a voter that
does not lead answers NOT_CONTROLLER, as Kafka's controllers do.
"""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.protocol.messages import ApiKey, AssignReplicasToDirsRequest, AssignReplicasToDirsResponse


@api(ApiKey.ASSIGN_REPLICAS_TO_DIRS, 0, 0)
async def handle(ctx: RequestContext[ClusterControl], request: AssignReplicasToDirsRequest
                 ) -> AssignReplicasToDirsResponse:
    registry = ctx.broker.kraft_brokers
    assert registry is not None  # the connection refuses the API without one
    return await registry.assign_dirs(request)
