"""OffsetFetch (9): committed offsets of one group (v1-7) or several (v8); -1 where none."""

from __future__ import annotations

from typing import Any

from grete.broker.context import RequestContext
from grete.broker.registry import api
from grete.protocol.messages import OffsetFetchRequest, OffsetFetchResponse

Partitions = list[tuple[str, int]] | None


@api(9, 1, 8)
def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    if ctx.version >= 8:
        groups = []
        for group in request.groups:
            wanted = (None if group.topics is None else
                      [(t.name, p) for t in group.topics for p in t.partition_indexes])
            error, topics = _fetch(ctx, group.group_id, wanted, request.require_stable)
            groups.append(OffsetFetchResponse.OffsetFetchResponseGroup(
                group_id=group.group_id, error_code=error, topics=[
                    OffsetFetchResponse.OffsetFetchResponseTopics(name=name, partitions=[
                        OffsetFetchResponse.OffsetFetchResponsePartitions(
                            partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
                            metadata=o.metadata, error_code=o.error) for p, o in parts])
                    for name, parts in topics.items()]))
        return OffsetFetchResponse(groups=groups)
    wanted = None if request.topics is None else [(t.name, p) for t in request.topics
                                                    for p in t.partition_indexes]
    error, topics = _fetch(ctx, request.group_id, wanted, request.require_stable)
    return OffsetFetchResponse(error_code=error, topics=[
        OffsetFetchResponse.OffsetFetchResponseTopic(name=name, partitions=[
            OffsetFetchResponse.OffsetFetchResponsePartition(
                partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
                metadata=o.metadata, error_code=o.error if ctx.version >= 2 or not error else error)
            for p, o in parts])
        for name, parts in topics.items()])


def _fetch(ctx: RequestContext, group_id: str, wanted: Partitions,
           require_stable: bool) -> tuple[int, dict[str, list[tuple[int, Any]]]]:
    error, offsets = ctx.broker.group_coordinator.fetch_offsets(group_id, wanted, require_stable)
    topics: dict[str, list[tuple[int, Any]]] = {}
    for (topic, partition), found in sorted(offsets.items()):
        topics.setdefault(topic, []).append((partition, found))
    return error, topics
