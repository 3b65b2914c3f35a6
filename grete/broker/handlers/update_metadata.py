"""UpdateMetadata (6), from the controller of a ZooKeeper cluster: the live brokers, the controller,
and partition states — the only way a ZooKeeper-mode broker learns the cluster's metadata (Kafka's
ZkMetadataCache.updateMetadata)."""

from __future__ import annotations

from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import DataPlane
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, UpdateMetadataRequest, UpdateMetadataResponse


@api(ApiKey.UPDATE_METADATA, 5, 8)
def handle(ctx: RequestContext[DataPlane], request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    cluster = ctx.broker.cluster
    assert isinstance(cluster, ZkBroker)
    if request.broker_epoch != -1 and request.broker_epoch < cluster.broker_epoch:
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    if request.controller_epoch < cluster.metadata.controller_epoch:
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    cluster.metadata.apply(request)
    return UpdateMetadataResponse(error_code=0)
