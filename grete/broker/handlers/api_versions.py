"""ApiVersions (18): the advertisement every client reads first.

The response header is always v0 (handled by the codecs' response_header_version). Client software
name/version are not validated: librdkafka falls back to v0 on INVALID_REQUEST, so leniency is safer.
From v3 on it carries the supported and finalized feature levels (``grete.broker.features``): the
single node's, or none in a ZooKeeper cluster, as a Kafka 3.9 ZooKeeper-mode broker answers.
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
    features = ctx.broker.features
    return ApiVersionsResponse(
        error_code=0, api_keys=keys,
        supported_features=[ApiVersionsResponse.SupportedFeatureKey(name=f.name, min_version=f.min_level,
                                                                   max_version=f.max_level)
                            for f in features.supported()],
        finalized_features_epoch=features.epoch,
        finalized_features=[ApiVersionsResponse.FinalizedFeatureKey(name=name, min_version_level=level,
                                                                   max_version_level=level)
                            for name, level in features.finalized().items()])
