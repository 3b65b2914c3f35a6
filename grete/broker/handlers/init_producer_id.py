"""InitProducerId (22): producer ids for idempotent producers (the Java and franz-go default).

A non-transactional producer always gets a fresh id with epoch 0, as in Kafka (an epoch bump
request from KIP-360 clients also gets a fresh id). Transactional ids need the transaction
coordinator, which grete does not have yet: they are answered with COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import InitProducerIdRequest, InitProducerIdResponse


@api(22, 0, 4)
def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        coordinator = ctx.broker.txn_coordinator
        if coordinator is None:
            return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                                          producer_epoch=-1)
        return coordinator.init_producer_id(ctx, request)
    producer_id = ctx.broker.producer_ids.next_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
