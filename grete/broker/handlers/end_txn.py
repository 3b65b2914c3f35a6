"""EndTxn (26): commit or abort; answered once the PrepareCommit/PrepareAbort is on the ISR.

v4 (KIP-890 part 1) only lets the answer carry TRANSACTION_ABORTABLE, which the coordinator never
answers here: v3's answers (measured on Kafka 4.3.1). v5 is transaction version 2 (KIP-890 part 2):
the coordinator bumps the producer epoch at every end and the answer names the producer id and epoch
the client continues with; a retry is recognised by the epoch one below (docs/transactions.md)."""

from __future__ import annotations

from grete.broker.groups.transactions import fenced_error
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, Res, allowed
from grete.coordinator.transactions.txn import TV2
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, EndTxnRequest, EndTxnResponse

TV2_VERSION = 5


@api(ApiKey.END_TXN, 0, 5)
async def handle(ctx: RequestContext[Transactions], request: EndTxnRequest) -> EndTxnResponse:
    if not allowed(ctx, Op.WRITE, Res.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    result = ctx.broker.txn_coordinator.end_txn(request.transactional_id, request.producer_id,
                                                request.producer_epoch, request.committed,
                                                TV2 if ctx.version >= TV2_VERSION else 0)
    error = result.error
    if error == ErrorCode.NONE:
        # The PrepareCommit/PrepareAbort must be on the ISR before the client hears "committed".
        error = await ctx.broker.txn_log_replicated(request.transactional_id)
    if error != ErrorCode.NONE:
        return EndTxnResponse(error_code=fenced_error(error, ctx.version, 2))
    return EndTxnResponse(error_code=ErrorCode.NONE, producer_id=result.producer_id,
                          producer_epoch=result.producer_epoch)
