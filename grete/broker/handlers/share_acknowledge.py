"""ShareAcknowledge (79): Accept, Release, Reject (and Renew, v2) of records a member acquired,
outside a ShareFetch; the final epoch closes the share session (KIP-932, KIP-1222)."""

from __future__ import annotations

import uuid

from grete.broker.groups.share_requests import acks_of, apply_acks, leader_of
from grete.broker.groups.share_sessions import FINAL_EPOCH
from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.messages import ApiKey, ShareAcknowledgeRequest, ShareAcknowledgeResponse

Response = ShareAcknowledgeResponse


@api(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def handle(ctx: RequestContext[Groups], request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    group_id, member_id = request.group_id or "", request.member_id
    if not allowed(ctx, Op.READ, Res.GROUP, group_id):
        return Response(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not group_id or not member_id:
        return Response(error_code=ErrorCode.INVALID_REQUEST, error_message="GroupId and MemberId must be set.")
    shares = ctx.broker.share_groups
    try:
        session = shares.session_for(group_id, member_id, request.share_session_epoch, fetch=False)
    except KafkaError as exc:
        return Response(error_code=exc.code, error_message=exc.message)
    acks = acks_of((t.topic_id, t.partitions) for t in request.topics)
    results = await apply_acks(ctx, group_id, member_id, acks)
    if request.share_session_epoch == FINAL_EPOCH:
        await shares.session_closed(session)
    else:
        session.bump()
    by_topic: dict[uuid.UUID, list[Response.PartitionData]] = {}
    for (topic_id, index), code in sorted(results.items()):
        leader, leader_epoch = leader_of(ctx, (topic_id, index))
        by_topic.setdefault(topic_id, []).append(Response.PartitionData(
            partition_index=index, error_code=code,
            current_leader=Response.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch)))
    return Response(acquisition_lock_timeout_ms=shares.lock_ms(group_id), responses=[
        Response.ShareAcknowledgeTopicResponse(topic_id=topic_id, partitions=parts)
        for topic_id, parts in by_topic.items()])
