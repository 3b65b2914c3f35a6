"""AddOffsetsToTxn (25): the group's ``__consumer_offsets`` partition joins the transaction, so the
transaction's marker also commits (or drops) the offsets TxnOffsetCommit stages there. v4 (KIP-890
part 1) only lets the answer carry TRANSACTION_ABORTABLE, which the coordinator never answers here:
the same answers as v3 (measured on Kafka 4.3.1)."""

from __future__ import annotations

from grete.broker.groups.transactions import fenced_error
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, ApiKey
from grete.protocol.topics import OFFSETS_TOPIC


@api(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def handle(ctx: RequestContext[Transactions], request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not allowed(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not request.group_id:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_GROUP_ID)
    try:
        await ctx.broker.ensure_offsets_topic()
    except KafkaError:  # could not be created (e.g. a full disk): clients retry this code
        return AddOffsetsToTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    partition = ctx.broker.group_coordinator.partition_for(request.group_id)
    error = ctx.broker.txn_coordinator.add_partitions(request.transactional_id, request.producer_id,
                                                      request.producer_epoch, [(OFFSETS_TOPIC, partition)])
    if error == ErrorCode.NONE:
        error = await ctx.broker.txn_log_replicated(request.transactional_id)
    return AddOffsetsToTxnResponse(error_code=fenced_error(error, ctx.version, 2))
