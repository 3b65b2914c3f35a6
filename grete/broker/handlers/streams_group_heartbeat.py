"""StreamsGroupHeartbeat (88): KIP-1071's one membership API for Kafka Streams (join with the
topology, heartbeat, acknowledge revoked tasks, leave), served by the group coordinator's streams part.

Internal topics the topology needs and that do not exist (repartition and changelog topics) are
created here, as Kafka's broker does for a streams group: with the partition counts the coordinator
decided, the replication factor and configs the topology asks for (0 / -1: the broker's defaults),
when the principal may create them. The answer already computed says MISSING_INTERNAL_TOPICS; a later
heartbeat finds them and gets tasks.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed, cluster_allowed
from grete.coordinator.groups.streams_requests import (
    ACCEPTABLE_RECOVERY_LAG,
    TASK_OFFSET_INTERVAL_MS,
    EndpointPartitions,
    StreamsHeartbeat,
)
from grete.coordinator.groups.streams_state import Tasks
from grete.coordinator.groups.streams_topology import CopartitionGroup, Subtopology, TopicInfo, Topology
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse
from grete.protocol.topics import INTERNAL_TOPICS

Response = StreamsGroupHeartbeatResponse
Request = StreamsGroupHeartbeatRequest
log = logging.getLogger("grete.broker")


@api(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, 0)
async def handle(ctx: RequestContext[Groups], request: Request) -> Response:
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, status=[])
    result = await ctx.broker.group_coordinator.streams_group_heartbeat(StreamsHeartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        endpoint_information_epoch=request.endpoint_information_epoch, instance_id=request.instance_id,
        rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        topology=None if request.topology is None else _topology(request.topology),
        active_tasks=_tasks(request.active_tasks), standby_tasks=_tasks(request.standby_tasks),
        warmup_tasks=_tasks(request.warmup_tasks), process_id=request.process_id,
        user_endpoint=None if request.user_endpoint is None else (request.user_endpoint.host,
                                                                  request.user_endpoint.port),
        client_tags=None if request.client_tags is None else tuple((kv.key, kv.value) for kv in request.client_tags),
        task_offsets=_offsets(request.task_offsets), task_end_offsets=_offsets(request.task_end_offsets),
        shutdown_application=request.shutdown_application, client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}"))
    if result.error is not ErrorCode.NONE:
        return Response(error_code=result.error, error_message=result.message, status=[])
    if result.to_create:
        await _create_internal_topics(ctx, result.to_create)
    active = None if result.active_tasks is None else _task_ids(result.active_tasks)
    return Response(
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms, acceptable_recovery_lag=ACCEPTABLE_RECOVERY_LAG,
        task_offset_interval_ms=TASK_OFFSET_INTERVAL_MS,
        status=None if result.statuses is None else [Response.Status(status_code=code, status_detail=detail)
                                                     for code, detail in result.statuses],
        active_tasks=active, standby_tasks=None if result.standby_tasks is None else _task_ids(result.standby_tasks),
        warmup_tasks=None if active is None else [], endpoint_information_epoch=result.endpoint_epoch,
        partitions_by_user_endpoint=None if result.endpoints is None else _endpoints(result.endpoints))


async def _create_internal_topics(ctx: RequestContext[Groups], topics: tuple[TopicInfo, ...]) -> None:
    """Create what is missing, as a CreateTopics by this principal would (TOPIC_ALREADY_EXISTS from a
    concurrent heartbeat is fine; other failures are logged and retried on the next heartbeat)."""
    may_create_all = cluster_allowed(ctx, Op.CREATE)
    for info in topics:
        if info.name in INTERNAL_TOPICS:
            # The broker's own topics are made by the broker, never sized by an application.
            log.warning("streams group: not creating %s for a topology", info.name)
            continue
        if not may_create_all and not allowed(ctx, Op.CREATE, Res.TOPIC, info.name):
            log.warning("streams group: not allowed to create internal topic %s", info.name)
            continue
        try:
            await ctx.broker.create_topic(info.name, info.partitions, info.replication_factor or -1,
                                          dict(info.configs), wait_open=False)
        except KafkaError as exc:
            if exc.code is not ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("streams group: could not create internal topic %s: %s", info.name, exc)


def _topic_info(info: Request.TopicInfo) -> TopicInfo:
    return TopicInfo(info.name, info.partitions, info.replication_factor,
                     tuple((kv.key, kv.value) for kv in info.topic_configs))


def _topology(t: Request.Topology) -> Topology:
    return Topology(t.epoch, tuple(
        Subtopology(s.subtopology_id, tuple(s.source_topics), tuple(s.source_topic_regex),
                    tuple(_topic_info(i) for i in s.state_changelog_topics), tuple(s.repartition_sink_topics),
                    tuple(_topic_info(i) for i in s.repartition_source_topics),
                    tuple(CopartitionGroup(tuple(g.source_topics), tuple(g.source_topic_regex),
                                           tuple(g.repartition_source_topics)) for g in s.copartition_groups))
        for s in t.subtopologies))


def _tasks(ids: list[Request.TaskIds] | None) -> Tasks | None:
    if ids is None:
        return None
    return frozenset((t.subtopology_id, p) for t in ids for p in t.partitions)


def _offsets(offsets: list[Request.TaskOffset] | None) -> tuple[tuple[str, int, int], ...] | None:
    return None if offsets is None else tuple((o.subtopology_id, o.partition, o.offset) for o in offsets)


def _task_ids(tasks: Tasks) -> list[Response.TaskIds]:
    by_sub: dict[str, list[int]] = defaultdict(list)
    for sub, p in sorted(tasks):
        by_sub[sub].append(p)
    return [Response.TaskIds(subtopology_id=sub, partitions=ps) for sub, ps in by_sub.items()]


def _endpoints(endpoints: list[EndpointPartitions]) -> list[Response.EndpointToPartitions]:
    return [Response.EndpointToPartitions(
        user_endpoint=Response.Endpoint(host=host, port=port),
        active_partitions=[Response.TopicPartition(topic=t, partitions=ps) for t, ps in active.items()],
        standby_partitions=[Response.TopicPartition(topic=t, partitions=ps) for t, ps in standby.items()])
        for (host, port), active, standby in endpoints]
