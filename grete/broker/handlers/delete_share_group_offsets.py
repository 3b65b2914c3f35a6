"""DeleteShareGroupOffsets (92): a share group with no members forgets topics' share partitions
(GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for one with members)."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse

Request = DeleteShareGroupOffsetsRequest
Response = DeleteShareGroupOffsetsResponse


@api(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def handle(ctx: RequestContext[Groups], request: Request) -> Response:
    group_id = request.group_id
    if not allowed(ctx, Op.DELETE, Res.GROUP, group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    shares = ctx.broker.share_groups
    status = shares.coordinator_error(group_id)
    if status is not None:
        return Response(error_code=status)
    if group_id not in shares.groups and not shares.known(group_id):
        return Response(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"Group {group_id} not found.")
    if shares.has_members(group_id):
        return Response(error_code=ErrorCode.NON_EMPTY_GROUP, error_message="The group is not empty.")
    topics = []
    for topic in request.topics:
        meta = ctx.broker.metadata.topic(topic.topic_name)
        if meta is None:
            topics.append(Response.DeleteShareGroupOffsetsResponseTopic(
                topic_name=topic.topic_name, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                error_message="This server does not host this topic-partition."))
        elif not allowed(ctx, Op.READ, Res.TOPIC, topic.topic_name):
            topics.append(Response.DeleteShareGroupOffsetsResponseTopic(
                topic_name=topic.topic_name, topic_id=meta.topic_id, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
        else:
            try:
                await shares.delete_offsets(group_id, meta.topic_id)
            except KafkaError as exc:  # a cluster's share coordinator could not be reached
                topics.append(Response.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=topic.topic_name, topic_id=meta.topic_id, error_code=exc.code,
                    error_message=exc.message))
                continue
            topics.append(Response.DeleteShareGroupOffsetsResponseTopic(topic_name=topic.topic_name,
                                                                        topic_id=meta.topic_id))
    return Response(responses=topics)
