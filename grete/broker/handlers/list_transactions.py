"""ListTransactions (66): transactional ids by state, producer id, age (v1) and id pattern (v2)."""

from __future__ import annotations

import re

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Transactions
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, ListTransactionsRequest, ListTransactionsResponse


@api(ApiKey.LIST_TRANSACTIONS, 0, 2)
def handle(ctx: RequestContext[Transactions], request: ListTransactionsRequest) -> ListTransactionsResponse:
    pattern = request.transactional_id_pattern if ctx.version >= 2 else None
    if pattern:
        try:
            re.compile(pattern)
        except re.error:
            return ListTransactionsResponse(error_code=ErrorCode.INVALID_REGULAR_EXPRESSION,
                                            unknown_state_filters=[], transaction_states=[])
    found, unknown = ctx.broker.txn_coordinator.list(
        request.state_filters, request.producer_id_filters,
        request.duration_filter if ctx.version >= 1 else -1, pattern or None)
    return ListTransactionsResponse(error_code=ErrorCode.NONE, unknown_state_filters=unknown,
                                    transaction_states=[ListTransactionsResponse.TransactionState(
                                        transactional_id=m.transactional_id, producer_id=m.producer_id,
                                        transaction_state=m.state.kafka_name) for m in found
                                        if allowed(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, m.transactional_id)])
