"""DescribeAcls (29): grete has no authorizer (no SASL/TLS listeners yet), and answers as Apache Kafka
does when ``authorizer.class.name`` is unset: SECURITY_DISABLED, "No Authorizer is configured"."""

from __future__ import annotations

from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import DescribeAclsRequest, DescribeAclsResponse

NO_AUTHORIZER = "No Authorizer is configured on the broker"


@api(29, 1, 3)
def handle(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    return DescribeAclsResponse(error_code=ErrorCode.SECURITY_DISABLED,
                                error_message=NO_AUTHORIZER, resources=[])
