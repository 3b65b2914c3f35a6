"""What ShareFetch and ShareAcknowledge share: acknowledgement batches applied per partition, the
per-partition error shapes. Handlers stay small; the state is ShareGroups'."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Protocol

from grete.broker.groups.share_sessions import PartitionKey
from grete.broker.requests.context import RequestContext
from grete.broker.requests.services import Groups
from grete.broker.security.authz import Op, Res, allowed
from grete.protocol.errors import ErrorCode, KafkaError


class AckBatch(Protocol):
    first_offset: int
    last_offset: int
    acknowledge_types: list[int]


class AckPartition(Protocol):
    partition_index: int

    @property
    def acknowledgement_batches(self) -> Sequence[AckBatch]: ...


def acks_of(topics: Iterable[tuple[uuid.UUID, Iterable[AckPartition]]]) -> dict[PartitionKey, list[tuple[int, int, list[int]]]]:
    acks: dict[PartitionKey, list[tuple[int, int, list[int]]]] = {}
    for topic_id, partitions in topics:
        for p in partitions:
            if p.acknowledgement_batches:
                acks.setdefault((topic_id, p.partition_index), []).extend(
                    (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches)
    return acks


def topic_readable(ctx: RequestContext[Groups], key: PartitionKey) -> bool:
    meta = ctx.broker.metadata.topic_by_id(key[0])
    return meta is None or allowed(ctx, Op.READ, Res.TOPIC, meta.name)


def leader_of(ctx: RequestContext[Groups], key: PartitionKey) -> tuple[int, int]:
    """(leader id, leader epoch) for CurrentLeader: this node while it leads the partition."""
    try:
        partition = ctx.broker.share_groups.resolve(key)
    except KafkaError:
        return -1, -1
    return (ctx.broker.node_id, partition.leader_epoch) if partition.is_leader else (partition.leader_id, -1)


async def apply_acks(ctx: RequestContext[Groups], group_id: str, member_id: str,
                     acks: dict[PartitionKey, list[tuple[int, int, list[int]]]]) -> dict[PartitionKey, ErrorCode]:
    """Each partition's acknowledgements, all or nothing per partition; its error code. In a cluster
    the answer waits until the share coordinators have the new state (a leader that dies after it
    cannot make the next one deliver an acknowledged record again)."""
    shares = ctx.broker.share_groups
    results: dict[PartitionKey, ErrorCode] = {}
    for key, batches in acks.items():
        if not topic_readable(ctx, key):
            results[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        try:
            await shares.prepare(group_id, key)
            results[key] = shares.acknowledge(group_id, member_id, key, batches)
        except KafkaError as exc:
            results[key] = exc.code
    written = await shares.flushed(group_id, [k for k, code in results.items() if code == ErrorCode.NONE])
    results.update({key: code for key, code in written.items() if code != ErrorCode.NONE})
    return results
