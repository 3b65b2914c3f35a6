"""KIP-951: who leads a partition, as this broker knows it, for the hints in Produce (v10+) and
Fetch (v16+) answers that refuse a request with NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH),
so a client can go to the new leader without a Metadata round trip.

Kafka's getCurrentLeader: the hosted replica's view (its leader and leader epoch) first, the
metadata cache's otherwise; the endpoint only if that broker is live on the request's listener.
"""

from __future__ import annotations

from typing import NamedTuple

from grete.broker.requests.context import RequestContext
from grete.broker.requests.services import DataPlane


class CurrentLeader(NamedTuple):
    leader_id: int
    leader_epoch: int
    endpoint: tuple[str, int, str | None] | None  # host, port, rack


def current_leader(ctx: RequestContext[DataPlane], topic: str, index: int) -> CurrentLeader:
    broker = ctx.broker
    partition = broker.replicas.partitions.get((topic, index))
    if partition is not None:
        leader_id = broker.node_id if partition.is_leader else partition.leader_id
        epoch = partition.leader_epoch
    else:
        meta = broker.metadata.topic(topic)
        pmeta = meta.partitions.get(index) if meta is not None else None
        leader_id, epoch = (pmeta.leader, pmeta.leader_epoch) if pmeta is not None else (-1, -1)
    info = next((b for b in broker.live_brokers() if b.id == leader_id), None) if leader_id >= 0 else None
    endpoint = info.endpoint(ctx.listener) if info is not None else None
    return CurrentLeader(leader_id, epoch,
                         None if endpoint is None or info is None else (endpoint.host, endpoint.port, info.rack))
