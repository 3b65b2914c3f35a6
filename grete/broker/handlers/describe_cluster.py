"""DescribeCluster (60): v0-2, the brokers (this node), the controller (this node) and cluster id.

The Java Admin client prefers it to Metadata for describeCluster. Brokers are reported with the
address advertised for the listener the request came in on, as Metadata does. With no authorizer,
the cluster's authorized operations are every cluster operation. A broker listener serves broker
endpoints (type 1); on the single node, a listener of ``controller.listener.names`` is a controller
endpoint (type 2) and answers with the quorum's controller, this node, as a Kafka 4 controller answers
an admin client started with ``--bootstrap-controller`` (KIP-919). Asking a listener for the other
type is MISMATCHED_ENDPOINT_TYPE.
v2 (KIP-1073) may ask for fenced brokers too: a KRaft cluster's registered brokers the controller
has fenced (stopped, or no heartbeat within ``broker.session.timeout.ms``), listed by id with
``is_fenced``; a ZooKeeper cluster's brokers are registered only while they live, and the single
node is never fenced.
"""

from __future__ import annotations

from grete.broker.handlers.metadata import OPERATIONS_NOT_REQUESTED
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.broker.security.authorizer import CLUSTER_OPERATIONS
from grete.broker.security.authz import Op, Res, cluster_allowed, operations
from grete.protocol.acls import CLUSTER_NAME
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DescribeClusterRequest, DescribeClusterResponse

BROKER_ENDPOINTS, CONTROLLER_ENDPOINTS = 1, 2
ENDPOINT_NAMES = {BROKER_ENDPOINTS: "BROKER", CONTROLLER_ENDPOINTS: "CONTROLLER"}


@api(ApiKey.DESCRIBE_CLUSTER, 0, 2)
def handle(ctx: RequestContext[ClusterControl], request: DescribeClusterRequest) -> DescribeClusterResponse:
    broker = ctx.broker
    endpoint_type = request.endpoint_type if ctx.version >= 1 else BROKER_ENDPOINTS
    if endpoint_type not in ENDPOINT_NAMES:
        code = ErrorCode.INVALID_REQUEST if ctx.version == 0 else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
        return _error(code, f"Unsupported endpoint type {endpoint_type}")
    served = CONTROLLER_ENDPOINTS if _controller_listener(ctx) else BROKER_ENDPOINTS
    if endpoint_type != served:
        code = ErrorCode.INVALID_REQUEST if ctx.version == 0 else ErrorCode.MISMATCHED_ENDPOINT_TYPE
        return _error(code, f"The request was sent to an endpoint of type {ENDPOINT_NAMES[served]}, but we wanted "
                            f"an endpoint of type {ENDPOINT_NAMES[endpoint_type]}")
    controller_id = broker.controller_id()
    if broker.quorum is not None and served == CONTROLLER_ENDPOINTS:
        # A voter of a quorum of several: the voters (their controller listener), the leader as controller.
        brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=v.node_id, host=v.host, port=v.port,
                                                                 rack=None) for v in broker.quorum.voter_addresses()]
        controller_id = broker.quorum.describe()[0]
    else:  # as Metadata lists them (the embedded node: on a controller listener, its controller endpoint)
        fenced = ctx.version >= 2 and request.include_fenced_brokers
        brokers = [DescribeClusterResponse.DescribeClusterBroker(broker_id=b.node_id, host=b.host, port=b.port,
                                                                 rack=b.rack, is_fenced=b.fenced)
                   for b in broker.cluster.listed_brokers(ctx.listener, fenced=fenced)]
    return DescribeClusterResponse(
        error_code=0, error_message=None, endpoint_type=served,
        cluster_id=broker.metadata.cluster_id, controller_id=controller_id,
        brokers=brokers,
        # As KafkaApis: the bitfield only for a principal that may describe the cluster, else 0.
        cluster_authorized_operations=((operations(ctx, Res.CLUSTER, CLUSTER_NAME, CLUSTER_OPERATIONS)
                                        if cluster_allowed(ctx, Op.DESCRIBE) else 0)
                                       if request.include_cluster_authorized_operations
                                       else OPERATIONS_NOT_REQUESTED))


def _controller_listener(ctx: RequestContext[ClusterControl]) -> bool:
    """A listener of ``controller.listener.names`` on a node that is its own quorum: a controller
    endpoint (KIP-919's ``--bootstrap-controller``)."""
    return ctx.listener in ctx.broker.cluster.controller_listeners()


def _error(code: ErrorCode, message: str) -> DescribeClusterResponse:
    return DescribeClusterResponse(error_code=code, error_message=message,
                                   cluster_id="", controller_id=-1, brokers=[])
