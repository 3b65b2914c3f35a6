"""EndTxn (26): commit or abort; answered once every partition of the transaction has its marker.

v4 (KIP-890 part 1) only lets the answer carry TRANSACTION_ABORTABLE, which the coordinator never
answers here: v3's answers (measured on Kafka 4.3.1). v5 belongs to transaction version 2 (an epoch
bump per transaction, KIP-890 part 2), which grete does not enable, so it is not offered."""

from __future__ import annotations

from grete.broker.authz import Op, Res, allowed
from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.broker.transactions import fenced_error
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import EndTxnRequest, EndTxnResponse


@api(26, 0, 4)
async def handle(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    if not allowed(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    error = ctx.broker.txn_coordinator.end_txn(request.transactional_id, request.producer_id,
                                               request.producer_epoch, request.committed)
    if error == ErrorCode.NONE:
        # The PrepareCommit/PrepareAbort must be on the ISR before the client hears "committed".
        error = await ctx.broker.txn_log_replicated(request.transactional_id)
    return EndTxnResponse(error_code=fenced_error(error, ctx.version, 2))
