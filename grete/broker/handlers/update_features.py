"""UpdateFeatures (57): finalize feature levels (KIP-584). Needs ALTER on the cluster.

The single node checks and applies the updates as Kafka 4.3's controller does: all or nothing, the
first failing feature named in a top-level INVALID_UPDATE_VERSION (``grete.broker.requests.features``);
a KRaft cluster's broker forwards the request to the active controller, which answers it.
v0 can only upgrade (see below); v2 answers without per-feature results, as
its schema has none. In a ZooKeeper cluster the answer is Kafka 3.9's: NOT_CONTROLLER from a broker
that is not the controller, else INVALID_REQUEST for every feature (none is supported).
"""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.features import UPGRADE, FeatureUpdate
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.broker.security.authz import Op, cluster_allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, UpdateFeaturesRequest, UpdateFeaturesResponse

Response = UpdateFeaturesResponse


@api(ApiKey.UPDATE_FEATURES, 0, 2)
async def handle(ctx: RequestContext[ClusterControl], request: UpdateFeaturesRequest) -> Response:
    # v0's AllowDowngrade is read by nobody in Kafka 4.3: its controller takes the upgrade type,
    # which a v0 request cannot carry, so a v0 downgrade is refused as an upgrade to a lower level.
    updates = [FeatureUpdate(u.feature, u.max_version_level, u.upgrade_type if ctx.version >= 1 else UPGRADE)
               for u in request.feature_updates]
    broker = ctx.broker
    if not cluster_allowed(ctx, Op.ALTER):
        return _top_level(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if not broker.features.managed:
        if broker.controller_id() != broker.node_id:
            return _top_level(ErrorCode.NOT_CONTROLLER, "This is not the correct controller for this cluster.")
        return _results(ctx.version, broker.features.zk_refusals(updates))
    # A KRaft broker sends it on to the active controller, whose checks (every broker's supported
    # levels, its own messages) decide, as Kafka's brokers forward it.
    forwarded = await broker.cluster.forwarded(request, ctx.version)
    if isinstance(forwarded, Response):
        return forwarded
    try:
        await broker.features.update(updates, request.validate_only)
    except KafkaError as exc:
        return _top_level(exc.code, exc.message)
    # Kafka's quirk: a feature that succeeded carries the message "NONE" (ApiError.NONE's).
    return _results(ctx.version, [(u.feature, ErrorCode.NONE, "NONE") for u in updates])


def _top_level(code: int, message: str | None) -> Response:
    return Response(error_code=code, error_message=message, results=[])


def _results(version: int, results: list[tuple[str, int, str | None]]) -> Response:
    return Response(error_code=0, error_message=None,
                    results=[] if version >= 2 else
                    [Response.UpdatableFeatureResult(feature=f, error_code=c, error_message=m)
                     for f, c, m in results])
