"""ApiVersions (18): the advertisement every client reads first.

The response header is always v0 (handled by the codecs' response_header_version). Client software
name/version are not validated: librdkafka falls back to v0 on INVALID_REQUEST, so leniency is safer.
From v3 the answer carries the ``transaction.version`` feature as Kafka 4.3.1 does: supported 0-2,
finalized at level 2, so 4.x clients use transaction version 2 (KIP-890 part 2: EndTxn 5, implicit
partition adds at Produce 12+ and TxnOffsetCommit 5, an epoch bump per transaction). As in Kafka
4.3.1, a v3 answer leaves out supported features whose minimum version is 0 (clients of that
version reject them), so there transaction.version is only finalized. Other
features (metadata.version, kraft.version, group.version, ...) describe a KRaft cluster and are not
advertised.
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
    supported = SUPPORTED_FEATURES if ctx.version >= ALL_FEATURES_VERSION else [
        f for f in SUPPORTED_FEATURES if f.min_version > 0]
    return ApiVersionsResponse(error_code=0, api_keys=keys, supported_features=supported,
                               finalized_features_epoch=FINALIZED_FEATURES_EPOCH,
                               finalized_features=FINALIZED_FEATURES)


TRANSACTION_VERSION = 2
ALL_FEATURES_VERSION = 4  # supported features with a minimum of 0 are listed from here on
# Clients keep the finalized features of the highest epoch they have seen; the set never changes.
FINALIZED_FEATURES_EPOCH = 0
SUPPORTED_FEATURES = [ApiVersionsResponse.SupportedFeatureKey(name="transaction.version", min_version=0,
                                                              max_version=TRANSACTION_VERSION)]
FINALIZED_FEATURES = [ApiVersionsResponse.FinalizedFeatureKey(name="transaction.version",
                                                              min_version_level=TRANSACTION_VERSION,
                                                              max_version_level=TRANSACTION_VERSION)]
