"""ApiVersions (18): the advertisement every client reads first.

The response header is always v0 (handled by the codecs' response_header_version). Client software
name/version are not validated: librdkafka falls back to v0 on INVALID_REQUEST, so leniency is safer.
From v3 on it carries the supported and finalized feature levels (``grete.broker.requests.features``): the
single node's, or none in a ZooKeeper cluster, as a Kafka 3.9 ZooKeeper-mode broker answers. A
finalized ``transaction.version`` 2 makes 4.x clients use transaction version 2 (KIP-890 part 2).
As in Kafka 4.3.1, a v3 answer leaves out supported features whose minimum level is 0 (clients of
that version reject them); they are still finalized there. The nodes of a KRaft cluster of several
also list kraft.version (0-1; a leader reads a new voter's range before adding it), finalized once
above 0 (a dynamic quorum), as Kafka 4.3.1's brokers and controllers do.
"""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import advertised_versions, api
from grete.broker.requests.services import ClusterControl
from grete.protocol.messages import ApiKey, ApiVersionsRequest, ApiVersionsResponse

ALL_FEATURES_VERSION = 4  # supported features with a minimum level of 0 are listed from here on


@api(ApiKey.API_VERSIONS, 0, 4)
def handle(ctx: RequestContext[ClusterControl], request: ApiVersionsRequest) -> ApiVersionsResponse:
    keys = [ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, lo, hi in advertised_versions(zk_broker=ctx.broker.cluster.zk_broker_apis,
                                                   direct=ctx.broker.direct is not None,
                                                   controller_only=ctx.broker.controller_only,
                                                   voter_changes=ctx.broker.cluster.forwards_voter_changes)]
    features = ctx.broker.features
    supported = [ApiVersionsResponse.SupportedFeatureKey(name=f.name, min_version=f.min_level, max_version=f.max_level)
                 for f in features.supported() if ctx.version >= ALL_FEATURES_VERSION or f.min_level > 0]
    return ApiVersionsResponse(
        error_code=0, api_keys=keys,
        supported_features=supported,
        finalized_features_epoch=features.epoch,
        finalized_features=[ApiVersionsResponse.FinalizedFeatureKey(name=name, min_version_level=level,
                                                                   max_version_level=level)
                            for name, level in features.finalized().items()])
