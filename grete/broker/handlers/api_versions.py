"""ApiVersions (18): the advertisement every client reads first.

The response header is always v0 (handled by the codecs' response_header_version). Client software
name/version are not validated: librdkafka falls back to v0 on INVALID_REQUEST, so leniency is safer.
No finalized features are advertised: in particular not ``transaction.version``, whose v2 protocol
(KIP-890) grete does not implement.
"""

from __future__ import annotations

from grete.broker.context import RequestContext
from grete.broker.registry import advertised_versions, api
from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse


@api(18, 0, 4)
def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    keys = [ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, lo, hi in advertised_versions(zk_broker=ctx.broker.cluster is not None,
                                                   direct=ctx.broker.direct is not None)]
    return ApiVersionsResponse(error_code=0, api_keys=keys)
