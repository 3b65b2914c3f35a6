"""AllocateProducerIds (67), a broker asking the controller of a ZooKeeper cluster for a block of
producer ids (KIP-730; Kafka 3.9's brokers use it from inter.broker.protocol.version 3.0 on, so a
Kafka broker in a grete cluster gets its ids here). The controller takes the next block from
``/latest_producer_id_block`` with a conditional write, as Kafka's ZkProducerIdManager does, and
answers NOT_CONTROLLER, BROKER_ID_NOT_REGISTERED or STALE_BROKER_EPOCH as Kafka's controller does.
grete's own brokers take their blocks from ZooKeeper directly (the pre-3.0 way, still valid). A
controller of a KRaft quorum grants blocks to its KRaft brokers as ProducerIdsRecords
(grete/broker/quorum/brokers.py)."""

from __future__ import annotations

from grete.broker.cluster.zk_broker import ZkBroker
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.coordinator.zookeeper.zk_layout import PRODUCER_ID_BLOCK_SIZE
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import AllocateProducerIdsRequest, AllocateProducerIdsResponse, ApiKey

Response = AllocateProducerIdsResponse


@api(ApiKey.ALLOCATE_PRODUCER_IDS, 0, 0)
async def handle(ctx: RequestContext[ClusterControl], request: AllocateProducerIdsRequest) -> Response:
    if ctx.broker.kraft_brokers is not None:  # a controller of a KRaft quorum, for its brokers
        return await ctx.broker.kraft_brokers.allocate_producer_ids(request)
    cluster = ctx.broker.cluster
    assert isinstance(cluster, ZkBroker)
    error = cluster.controller.producer_id_asker_error(request.broker_id, request.broker_epoch)
    if error:
        return Response(error_code=error, producer_id_start=-1, producer_id_len=-1)
    try:
        start = await cluster.metadata.allocate_producer_ids(PRODUCER_ID_BLOCK_SIZE, for_broker=request.broker_id)
    except KafkaError as exc:
        return Response(error_code=exc.code, producer_id_start=-1, producer_id_len=-1)
    return Response(error_code=ErrorCode.NONE, producer_id_start=start, producer_id_len=PRODUCER_ID_BLOCK_SIZE)
