"""InitProducerId (22): producer ids for idempotent and transactional producers.

Without a transactional id, a producer always gets a fresh id with epoch 0, as in Kafka (an epoch
bump request from KIP-360 clients also gets a fresh id). With one, the transaction coordinator
bumps the epoch of the id's producer (fencing older instances) or allocates the first one.
v5 (KIP-890 part 1) only lets the answer carry TRANSACTION_ABORTABLE, which InitProducerId never
needs: its answers are v4's (measured on Kafka 4.3.1, compat-tests/wire/test_txn_error_codes.py).
v6 (two-phase commit, KIP-939) is not offered.
"""

from __future__ import annotations

from grete.broker.groups.transactions import ensure_transaction_state_topic, fenced_error
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, Res, allowed, allowed_any, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, InitProducerIdRequest, InitProducerIdResponse


@api(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def handle(ctx: RequestContext[Transactions], request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is not None and not allowed(ctx, Op.WRITE, Res.TRANSACTIONAL_ID,
                                                            request.transactional_id):
        return InitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                                      producer_epoch=-1)
    if request.transactional_id is None and not (cluster_allowed(ctx, Op.IDEMPOTENT_WRITE)
                                                 or allowed_any(ctx, Op.WRITE, Res.TOPIC)):
        # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic.
        return InitProducerIdResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, producer_id=-1,
                                      producer_epoch=-1)
    if request.transactional_id is not None:
        try:
            await ensure_transaction_state_topic(ctx.broker)
        except KafkaError:  # could not be created (e.g. a full disk): clients retry this code
            return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                                          producer_epoch=-1)
        result = ctx.broker.txn_coordinator.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms,
            request.producer_id if ctx.version >= 3 else -1, request.producer_epoch if ctx.version >= 3 else -1)
        error = result.error
        if error == ErrorCode.NONE:
            error = await ctx.broker.txn_log_replicated(request.transactional_id)
        if error != ErrorCode.NONE:
            return InitProducerIdResponse(error_code=fenced_error(error, ctx.version, 4), producer_id=-1,
                                          producer_epoch=-1)
        return InitProducerIdResponse(error_code=ErrorCode.NONE,
                                      producer_id=result.producer_id, producer_epoch=result.producer_epoch)
    try:
        producer_id = ctx.broker.producer_ids.next_id()
    except KafkaError as exc:
        return InitProducerIdResponse(error_code=exc.code, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(error_code=ErrorCode.NONE, producer_id=producer_id,
                                  producer_epoch=0)
