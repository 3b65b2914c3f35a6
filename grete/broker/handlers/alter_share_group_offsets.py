"""AlterShareGroupOffsets (91): set share partitions' start offsets of a share group with no members
(NON_EMPTY_GROUP otherwise); what was in flight is forgotten."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse, ApiKey

Request = AlterShareGroupOffsetsRequest
Response = AlterShareGroupOffsetsResponse


@api(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def handle(ctx: RequestContext[Groups], request: Request) -> Response:
    group_id = request.group_id
    if not allowed(ctx, Op.READ, Res.GROUP, group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    shares = ctx.broker.share_groups
    status = shares.coordinator_error(group_id)
    if status is not None:
        return Response(error_code=status)
    if shares.has_members(group_id):
        return Response(error_code=ErrorCode.NON_EMPTY_GROUP,
                        error_message="The group is not empty.")
    topics = []
    for topic in request.topics:
        meta = ctx.broker.metadata.topic(topic.topic_name)
        rows = []
        for p in topic.partitions:
            code, message = ErrorCode.NONE, None
            if meta is None or p.partition_index not in meta.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif not allowed(ctx, Op.READ, Res.TOPIC, topic.topic_name):
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                try:
                    await shares.alter(group_id, (meta.topic_id, p.partition_index), p.start_offset)
                except KafkaError as exc:
                    code, message = exc.code, exc.message
            rows.append(Response.AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index, error_code=code, error_message=message))
        topics.append(Response.AlterShareGroupOffsetsResponseTopic(
            topic_name=topic.topic_name, topic_id=meta.topic_id if meta is not None else
            Response.AlterShareGroupOffsetsResponseTopic().topic_id, partitions=rows))
    return Response(responses=topics)
