"""DirectReplicaRegister (32002, grete's own): a follower asks its leader to push partitions.

Offered only when ``direct.transports`` is set (docs/direct.md, "Replication push"); refused with
INVALID_REQUEST unless ``direct.replication.enable`` is set here too. Inter-broker, so it needs
CLUSTER_ACTION as Fetch from a replica does. The leader maps the follower's receive region, opens
the channel to its endpoint, and answers per partition: 0 when it pushes it from the follower's log
end on; otherwise the follower keeps fetching it.
"""

from __future__ import annotations

from grete.broker.direct.service import DirectService
from grete.broker.replica.partition import Partition
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DirectReplicaRegisterRequest, DirectReplicaRegisterResponse


@api(ApiKey.DIRECT_REPLICA_REGISTER, 0, 0)
def handle(ctx: RequestContext[DataPlane], request: DirectReplicaRegisterRequest) -> DirectReplicaRegisterResponse:
    service = ctx.broker.direct
    assert isinstance(service, DirectService)  # the connection refuses this API when it is off
    if ctx.broker.authorizer is not None and not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return _refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if service.pusher is None:
        return _refused(ErrorCode.INVALID_REQUEST, "direct.replication.enable is off on this broker")
    if request.transport not in service.transports:
        return _refused(ErrorCode.UNSUPPORTED_VERSION, f"direct transport {request.transport!r} is not offered")

    def hosted(topic: str, index: int) -> Partition | None:
        return ctx.broker.replicas.partitions.get((topic, index))
    return service.pusher.register(request, hosted)


def _refused(code: ErrorCode, message: str | None) -> DirectReplicaRegisterResponse:
    return DirectReplicaRegisterResponse(throttle_time_ms=0, error_code=code, error_message=message, topics=[])
