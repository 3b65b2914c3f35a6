"""ControllerRegistration (70): v0, a controller of a KRaft quorum registers its listeners and
supported features with the active controller (Kafka's ControllerRegistrationManager). Served by a
controller of a quorum of several: the leader writes a RegisterControllerRecord, as Kafka's
QuorumController.registerController does, so a Kafka controller in a quorum a grete controller leads
registers (and DescribeCluster on its controller listener lists it, which tools using
``--bootstrap-controller`` need to reach it). NOT_CONTROLLER on the other voters."""

from __future__ import annotations

from grete.broker.quorum.controller_node import bootstrapped
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.coordinator.kraft.quorum_store import QuorumMetadataStore
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ControllerRegistrationRequest, ControllerRegistrationResponse
from grete.protocol.metadata import RegisterControllerRecord

Response = ControllerRegistrationResponse


def _incompatible(request: ControllerRegistrationRequest, finalized: dict[str, int]) -> str | None:
    """Kafka's check: every finalized feature level is in the controller's supported range."""
    ranges = {f.name: (f.min_supported_version, f.max_supported_version) for f in request.features}
    for name, level in sorted(finalized.items()):
        low, high = ranges.get(name, (0, 0))
        if level > 0 and not low <= level <= high:
            return (f"Unable to register because the controller has an incompatible supported version range "
                    f"for {name}: {low}-{high}, while the finalized level is {level}")
    return None


@api(ApiKey.CONTROLLER_REGISTRATION, 0, 0)
async def handle(ctx: RequestContext[ClusterControl], request: ControllerRegistrationRequest) -> Response:
    driver, store = ctx.broker.quorum, ctx.broker.metadata
    assert driver is not None and isinstance(store, QuorumMetadataStore)  # the connection refuses it otherwise
    if not driver.leads:
        return Response(error_code=ErrorCode.NOT_CONTROLLER, error_message="this controller does not lead the quorum")
    if not bootstrapped(store):  # a record before metadata.version halts a Kafka controller's loader
        return Response(error_code=ErrorCode.REQUEST_TIMED_OUT,
                        error_message="the quorum's bootstrap records are not committed yet")
    problem = _incompatible(request, store.finalized_features()[1] or {})
    if problem is not None:
        return Response(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=problem)
    record = RegisterControllerRecord(
        controller_id=request.controller_id, incarnation_id=request.incarnation_id,
        zk_migration_ready=request.zk_migration_ready,
        end_points=[RegisterControllerRecord.ControllerEndpoint(name=e.name, host=e.host, port=e.port,
                                                                security_protocol=e.security_protocol)
                    for e in request.listeners],
        features=[RegisterControllerRecord.ControllerFeature(name=f.name, min_supported_version=f.min_supported_version,
                                                             max_supported_version=f.max_supported_version)
                  for f in request.features])
    try:
        await store.commit([record])
    except KafkaError as exc:
        return Response(error_code=exc.code, error_message=exc.message)
    return Response(error_code=ErrorCode.NONE)
