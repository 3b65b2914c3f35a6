"""OffsetCommit (8): group commits (generation and member checked; v9+ carries a KIP-848 member's
epoch instead, STALE_MEMBER_EPOCH when it is not current) and simple commits (generation -1, empty
member id), stored in ``__consumer_offsets``. v10 names topics by id.

v0 and v1, which a broker of a ZooKeeper cluster serves as Kafka 3.9's does (Kafka 4 removed them,
KIP-896): v0's offsets go to ZooKeeper (``/consumers/<group>/offsets/<topic>/<partition>``, read
back by OffsetFetch v0), v1's to ``__consumer_offsets`` with the commit timestamp it names."""

from __future__ import annotations

from grete.broker.requests.context import RequestContext
from grete.broker.requests.registry import api
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.coordinator.groups.group_types import OffsetCommit
from grete.protocol.errors import ErrorCode
from grete.protocol.messages import ApiKey, OffsetCommitRequest, OffsetCommitResponse


@api(ApiKey.OFFSET_COMMIT, 0, 10, advertised_min=2)
async def handle(ctx: RequestContext[Groups], request: OffsetCommitRequest) -> OffsetCommitResponse:
    unknown_ids = _names_from_ids(ctx, request) if ctx.version >= 10 else set()
    commits = [OffsetCommit(topic.name, p.partition_index, p.committed_offset, p.committed_leader_epoch,
                            p.committed_metadata, p.commit_timestamp if ctx.version == 1 else -1)
               for topic in request.topics if topic.name not in unknown_ids for p in topic.partitions]
    if not allowed(ctx, Op.READ, Res.GROUP, request.group_id):
        errors = {(c.topic, c.partition): int(ErrorCode.GROUP_AUTHORIZATION_FAILED) for c in commits}
        known: list[OffsetCommit] = []
    else:
        denied = {c.topic for c in commits if not allowed(ctx, Op.READ, Res.TOPIC, c.topic)}
        known, errors = split_unknown(ctx, [c for c in commits if c.topic not in denied])
        errors.update({(c.topic, c.partition): int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                       for c in commits if c.topic in denied})
    if known and ctx.version == 0:
        errors.update(await _to_zookeeper(ctx, request.group_id, known))
    elif known and ctx.broker.share_groups.holds(request.group_id):  # a share group commits no offsets
        errors.update({(c.topic, c.partition): int(ErrorCode.GROUP_ID_NOT_FOUND) for c in known})
    elif known:
        errors.update(await ctx.broker.group_coordinator.commit_offsets(
            group_id=request.group_id, generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id, group_instance_id=request.group_instance_id,
            retention_ms=request.retention_time_ms, offsets=known, api_version=ctx.version))
    errors.update({(t.name, p.partition_index): int(ErrorCode.UNKNOWN_TOPIC_ID)
                   for t in request.topics if t.name in unknown_ids for p in t.partitions})
    return OffsetCommitResponse(topics=[
        OffsetCommitResponse.OffsetCommitResponseTopic(name=topic.name, topic_id=topic.topic_id, partitions=[
            OffsetCommitResponse.OffsetCommitResponsePartition(
                partition_index=p.partition_index, error_code=errors[(topic.name, p.partition_index)])
            for p in topic.partitions])
        for topic in request.topics])


async def _to_zookeeper(ctx: RequestContext[Groups], group_id: str,
                        commits: list[OffsetCommit]) -> dict[tuple[str, int], int]:
    """v0: each offset written to ZooKeeper, as Kafka 3.9's setOrCreateConsumerOffset."""
    errors: dict[tuple[str, int], int] = {}
    limit = ctx.broker.config.get_int("offset.metadata.max.bytes")
    for commit in commits:
        tp = (commit.topic, commit.partition)
        if commit.metadata is not None and len(commit.metadata) > limit:
            errors[tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            continue
        await ctx.broker.cluster.store_zookeeper_offset(group_id, commit.topic, commit.partition, commit.offset)
        errors[tp] = ErrorCode.NONE
    return errors


def split_unknown(ctx: RequestContext[Groups],
                  commits: list[OffsetCommit]) -> tuple[list[OffsetCommit], dict[tuple[str, int], int]]:
    """Kafka answers UNKNOWN_TOPIC_OR_PARTITION for a partition its metadata does not have, before
    the coordinator sees the commit: (commits for known partitions, errors of the others)."""
    known: list[OffsetCommit] = []
    errors: dict[tuple[str, int], int] = {}
    metadata = ctx.broker.metadata
    for commit in commits:
        meta = metadata.topic(commit.topic)
        if meta is None or commit.partition not in meta.partitions:
            errors[(commit.topic, commit.partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            known.append(commit)
    return known, errors


def _names_from_ids(ctx: RequestContext[Groups], request: OffsetCommitRequest) -> set[str]:
    """v10 names topics by id: fill in each topic's name; an id the broker does not know gets a
    stand-in name (returned) whose partitions answer UNKNOWN_TOPIC_ID, as Kafka 4.3.1 does."""
    unknown: set[str] = set()
    for topic in request.topics:
        meta = ctx.broker.metadata.topic_by_id(topic.topic_id)
        topic.name = meta.name if meta is not None else f"\0{topic.topic_id}"
        if meta is None:
            unknown.add(topic.name)
    return unknown
