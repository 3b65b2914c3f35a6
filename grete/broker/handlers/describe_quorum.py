"""DescribeQuorum (55): v0-2, the state of the KRaft metadata quorum (``kafka-metadata-quorum describe``).

Served by a node that runs a quorum: the embedded node, a quorum of one whose only voter is itself
and always its leader. As Kafka's KafkaApis and KafkaRaftClient: DESCRIBE on the cluster first
(else CLUSTER_AUTHORIZATION_FAILED for the whole request), then the request must name exactly
``__cluster_metadata`` partition 0 (else UNKNOWN_TOPIC_OR_PARTITION on each partition it names).
The leader reports itself as caught up now; v2 adds the voters' directory ids and their endpoints.
A broker of a KRaft cluster forwards it to the active controller and relays the answer (Kafka's
brokers forward it, so ``kafka-metadata-quorum --bootstrap-server`` works). A ZooKeeper-mode broker
has no quorum, neither advertises nor serves this API (as Kafka 3.9's).
"""

from __future__ import annotations

import time

from grete.broker.quorum.driver import RaftDriver
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import ClusterControl
from grete.broker.security.authz import cluster_allowed
from grete.coordinator.kraft.store import KRaftMetadataStore
from grete.protocol.acls import AclOperation
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, DescribeQuorumRequest, DescribeQuorumResponse
from grete.protocol.topics import METADATA_TOPIC

Response = DescribeQuorumResponse


@api(ApiKey.DESCRIBE_QUORUM, 0, 2)
async def handle(ctx: RequestContext[ClusterControl], request: DescribeQuorumRequest) -> DescribeQuorumResponse:
    if not cluster_allowed(ctx, AclOperation.DESCRIBE):
        return Response(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, topics=[])
    forwarded = await ctx.broker.cluster.forwarded(request, ctx.version)
    if forwarded is not None:
        assert isinstance(forwarded, DescribeQuorumResponse)
        return forwarded
    store = ctx.broker.metadata
    asked = [(t.topic_name, p.partition_index) for t in request.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, 0)] or not isinstance(store, KRaftMetadataStore):
        return Response(error_code=0, topics=[Response.TopicData(topic_name=t.topic_name, partitions=[
            Response.PartitionData(partition_index=p.partition_index,
                                   error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, leader_id=-1, leader_epoch=-1,
                                   high_watermark=-1) for p in t.partitions]) for t in request.topics])
    if ctx.broker.quorum is not None:
        return _from_driver(ctx.broker.quorum)
    quorum = store.quorum
    now = int(time.time() * 1000)
    leader = Response.ReplicaState(replica_id=quorum.node_id, replica_directory_id=quorum.directory_id,
                                   log_end_offset=quorum.log_end_offset, last_fetch_timestamp=now,
                                   last_caught_up_timestamp=now)
    partition = Response.PartitionData(partition_index=0, error_code=0, leader_id=quorum.leader_id,
                                       leader_epoch=quorum.epoch, high_watermark=quorum.high_watermark,
                                       current_voters=[leader], observers=[])
    # The voter's endpoints: its controller listeners (KIP-919), or every listener of a node without one.
    controller_names = ctx.broker.config.get_list("controller.listener.names")
    endpoints = [a for a in ctx.broker.advertised if a.name in controller_names] or ctx.broker.advertised
    node = Response.Node(node_id=quorum.node_id, listeners=[
        Response.Listener(name=a.name, host=a.host, port=a.port) for a in endpoints])
    return Response(error_code=0, topics=[Response.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])],
                    nodes=[node])


def _from_driver(driver: RaftDriver) -> DescribeQuorumResponse:
    """A voter of a quorum of several: the leader's view of every replica (NOT_LEADER_OR_FOLLOWER on
    the others, as Kafka's KafkaRaftClient answers), the voters' controller endpoints."""
    partition = driver.raft.describe_quorum(int(time.time() * 1000))
    nodes = []
    for node in sorted(driver.raft.history.latest.nodes.values(), key=lambda n: n.node_id):
        # A dynamic quorum's voter set has every voter's endpoints; a static one, the configured address.
        listeners = [Response.Listener(name=e.listener, host=e.host, port=e.port) for e in node.endpoints]
        address = driver.address_of(node.node_id)
        if not listeners and address is not None:
            listeners = [Response.Listener(name=driver.listener, host=address.host, port=address.port)]
        nodes.append(Response.Node(node_id=node.node_id, listeners=listeners))
    return Response(error_code=0, topics=[Response.TopicData(topic_name=METADATA_TOPIC, partitions=[partition])],
                    nodes=nodes)
