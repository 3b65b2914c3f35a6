"""ControlledShutdown (7), a broker asking the controller to move leadership off it before it stops
(Kafka's KafkaController.doControlledShutdown). v0's header has no client id; grete serves v1-3
(Kafka 3.9 brokers send v3)."""

from __future__ import annotations

from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, ControlledShutdownRequest, ControlledShutdownResponse


@api(ApiKey.CONTROLLED_SHUTDOWN, 1, 3)
async def handle(ctx: RequestContext[ClusterControl], request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    cluster = ctx.broker.cluster
    assert isinstance(cluster, ZkBroker)
    if not cluster.controller.active:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER)
    error, remaining = await cluster.controller.controlled_shutdown(
        request.broker_id, request.broker_epoch if ctx.version >= 2 else -1)
    return ControlledShutdownResponse(error_code=error, remaining_partitions=[
        ControlledShutdownResponse.RemainingPartition(topic_name=t, partition_index=p) for t, p in remaining])
