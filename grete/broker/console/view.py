"""The console page's data, assembled from the broker's state on each request (nothing is kept
between requests but the charts' samples).

The cluster part (brokers, topics, partitions, leaders, ISR) is the broker's metadata cache: on a
cluster it is the controller's view as every broker holds it. A broker named in a replica list but
not live is shown down. Groups are those this broker coordinates (it holds their state); the
others are named by the broker that leads their ``__consumer_offsets`` partition. Lag is the
leader's high watermark less the committed offset: read here where this broker leads the partition,
else asked of its leader (ListOffsets, the inter-broker client share groups use for the same end).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from grete.broker.broker import Broker
from grete.coordinator.groups.group_state import Group, GroupState
from grete.protocol.codec import Reader
from grete.protocol.errors import ProtocolError
from grete.protocol.messages.consumer_protocol import ConsumerProtocolAssignment
from grete.protocol.topics import OFFSETS_TOPIC

END_OFFSET_TIMEOUT_S = 2.0

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class BrokerRow:
    id: int
    endpoint: str
    rack: str | None
    live: bool
    controller: bool
    local: bool
    leaders: int = 0
    replicas: int = 0


@dataclass(slots=True)
class PartitionRow:
    index: int
    leader: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]
    leader_live: bool
    under_replicated: bool
    size_bytes: int | None = None  # where this broker hosts it
    end_offset: int | None = None


@dataclass(slots=True)
class TopicRow:
    name: str
    internal: bool
    partitions: list[PartitionRow]
    replication: int = 0
    under_replicated: int = 0
    offline: int = 0  # partitions without a live leader

    def __post_init__(self) -> None:
        self.replication = max((len(p.replicas) for p in self.partitions), default=0)
        self.under_replicated = sum(p.under_replicated for p in self.partitions)
        self.offline = sum(not p.leader_live for p in self.partitions)


@dataclass(slots=True)
class MemberRow:
    member_id: str
    client_id: str
    host: str
    assigned: str


@dataclass(slots=True)
class LagRow:
    topic: str
    partition: int
    committed: int
    end: int | None
    owner: str = ""

    @property
    def lag(self) -> int | None:
        return None if self.end is None else max(self.end - self.committed, 0)


@dataclass(slots=True)
class GroupRow:
    group_id: str
    kind: str  # classic, consumer, streams, share
    state: str
    members: list[MemberRow] = field(default_factory=list)
    lags: list[LagRow] = field(default_factory=list)

    @property
    def total_lag(self) -> int | None:
        known = [row.lag for row in self.lags if row.lag is not None]
        return sum(known) if known else None


@dataclass(slots=True)
class LogDirRow:
    path: str
    online: bool
    reason: str
    cordoned: bool
    partitions: int
    size_bytes: int
    total_bytes: int
    usable_bytes: int


@dataclass(slots=True)
class ClusterView:
    cluster_id: str
    node_id: int
    controller_id: int
    brokers: list[BrokerRow]
    topics: list[TopicRow]


@dataclass(slots=True)
class GroupsView:
    groups: list[GroupRow]
    # Brokers coordinating the rest: broker id (-1: no leader) -> its __consumer_offsets partitions.
    elsewhere: dict[int, list[int]]


# --- brokers, topics, partitions -------------------------------------------------------------------
def cluster_view(broker: Broker) -> ClusterView:
    live = {b.id: b for b in broker.live_brokers()}
    controller = broker.controller_id()
    hosted = broker.partitions
    topics = []
    counts: dict[int, list[int]] = {}  # broker -> [leaders, replicas]
    listener = broker.advertised[0].name if broker.advertised else ""  # offline replicas as Metadata lists them
    for name, meta in sorted(broker.metadata.topics().items()):
        rows = []
        for index, p in sorted(meta.partitions.items()):
            local = hosted.get((name, index))
            offline = broker.cluster.offline_replicas(meta, index, listener)
            rows.append(PartitionRow(index, p.leader, list(p.replicas), list(p.isr), offline,
                                     p.leader in live, len(p.isr) < len(p.replicas),
                                     local.size_bytes if local is not None else None,
                                     local.high_watermark if local is not None and local.is_leader else None))
            for replica in p.replicas:
                counts.setdefault(replica, [0, 0])[1] += 1
            if p.leader >= 0:
                counts.setdefault(p.leader, [0, 0])[0] += 1
        topics.append(TopicRow(name, meta.internal, rows))
    brokers = []
    for broker_id in sorted(live.keys() | counts.keys()):
        info = live.get(broker_id)
        endpoint = f"{info.endpoints[0].host}:{info.endpoints[0].port}" if info is not None and info.endpoints else ""
        leaders, replicas = counts.get(broker_id, [0, 0])
        brokers.append(BrokerRow(broker_id, endpoint, info.rack if info is not None else None, info is not None,
                                 broker_id == controller, broker_id == broker.node_id, leaders, replicas))
    return ClusterView(broker.metadata.cluster_id, broker.node_id, controller, brokers, topics)


# --- groups ----------------------------------------------------------------------------------------
async def groups_view(broker: Broker) -> GroupsView:
    coordinator, _ = broker.coordinators()
    groups = dict(coordinator.groups) if coordinator is not None else {}
    rows = [row for _, group in sorted(groups.items()) if (row := _group_row(broker, group)) is not None]
    rows.extend(await _share_rows(broker))
    rows.sort(key=lambda row: row.group_id)
    wanted = {(lag.topic, lag.partition) for row in rows for lag in row.lags if lag.end is None}
    ends = await end_offsets(broker, wanted)
    for row in rows:
        for lag in row.lags:
            if lag.end is None:
                lag.end = ends.get((lag.topic, lag.partition))
    return GroupsView(rows, _elsewhere(broker))


def _group_row(broker: Broker, group: Group) -> GroupRow | None:
    from_topic_id = broker.metadata.topic_by_id
    owners: dict[TopicPartition, str] = {}
    if group.consumer is not None:
        kind, state = "consumer", group.consumer.state_name()
        members = []
        for m in group.consumer.members.values():
            names = sorted((meta.name, p) for topic_id, p in m.assigned
                           if (meta := from_topic_id(topic_id)) is not None)
            members.append(MemberRow(m.member_id, m.client_id, m.client_host, _partitions_text(names)))
            owners.update(dict.fromkeys(names, m.member_id))
    elif group.streams is not None:
        kind, state = "streams", group.streams.state_name()
        members = [MemberRow(m.member_id, m.client_id, m.client_host,
                             f"{len(m.assigned)} active, {len(m.standby)} standby task(s)")
                   for m in group.streams.members.values()]
    else:
        if group.is_(GroupState.DEAD):
            return None
        kind, state = "classic", group.state.value
        members = []
        for member in group.members.values():
            names = _classic_assignment(member.assignment) if group.protocol_type == "consumer" else []
            members.append(MemberRow(member.member_id, member.client_id, member.client_host,
                                     _partitions_text(names)))
            owners.update(dict.fromkeys(names, member.member_id))
    lags = [LagRow(topic, index, committed.offset, _local_end(broker, topic, index), owners.get((topic, index), ""))
            for (topic, index), committed in sorted(group.offsets.items())]
    return GroupRow(group.group_id, kind, state, members, lags)


async def _share_rows(broker: Broker) -> list[GroupRow]:
    """Share groups: lag is the high watermark less the share-partition start offset less the
    records past it already delivered (as DescribeShareGroupOffsets v1 answers it)."""
    shares = broker.share_groups
    rows = []
    for group_id, group in sorted(shares.groups.items()):
        members = [MemberRow(m.member_id, m.client_id, m.client_host,
                             _partitions_text(sorted((meta.name, p) for topic_id, parts in m.assignment.items()
                                                     if (meta := broker.metadata.topic_by_id(topic_id)) is not None
                                                     for p in parts)))
                   for m in group.members.values()]
        lags = []
        for (topic_id, index), (start, complete) in sorted((await shares.described(group_id, None)).items()):
            meta = broker.metadata.topic_by_id(topic_id)
            if meta is None or start < 0:
                continue
            # The start offset plus what is delivered past it counts as consumed.
            lags.append(LagRow(meta.name, index, start + complete, _local_end(broker, meta.name, index)))
        rows.append(GroupRow(group_id, "share", group.state, members, lags))
    return rows


def _classic_assignment(data: bytes) -> list[TopicPartition]:
    """A classic consumer's assignment (ConsumerProtocolAssignment), as its leader wrote it."""
    if len(data) < 2:
        return []
    try:
        reader = Reader(data)
        version = reader.int16()
        assignment = ConsumerProtocolAssignment.decode(reader, min(max(version, 0), 3))
    except ProtocolError:  # the group leader's bytes: shown as no assignment if they do not parse
        return []
    return sorted((t.topic, p) for t in assignment.assigned_partitions for p in t.partitions)


def _partitions_text(assigned: list[TopicPartition]) -> str:
    by_topic: dict[str, list[int]] = {}
    for topic, index in assigned:
        by_topic.setdefault(topic, []).append(index)
    return "; ".join(f"{topic} [{', '.join(map(str, parts))}]" for topic, parts in sorted(by_topic.items()))


def _local_end(broker: Broker, topic: str, index: int) -> int | None:
    """The high watermark where this broker leads the partition (or hosts it on a single node)."""
    partition = broker.partitions.get((topic, index))
    if partition is None or (broker.cluster.replicates and not partition.is_leader):
        return None
    return partition.high_watermark


async def end_offsets(broker: Broker, keys: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
    """High watermarks of partitions led by other brokers, from their leaders, all at once; what has
    no answer within END_OFFSET_TIMEOUT_S is None (shown as unknown)."""
    wanted = sorted(keys)
    if not broker.cluster.replicates or not wanted:
        return {}
    tasks = [asyncio.ensure_future(broker.share_groups.end_offset(topic, index)) for topic, index in wanted]
    done, pending = await asyncio.wait(tasks, timeout=END_OFFSET_TIMEOUT_S)
    for task in pending:
        task.cancel()
    return {key: task.result() if task in done and task.exception() is None else None
            for key, task in zip(wanted, tasks, strict=True)}


def _elsewhere(broker: Broker) -> dict[int, list[int]]:
    meta = broker.metadata.topic(OFFSETS_TOPIC)
    if not broker.cluster.replicates or meta is None:
        return {}
    out: dict[int, list[int]] = {}
    for index, p in sorted(meta.partitions.items()):
        if p.leader != broker.node_id:
            out.setdefault(p.leader if p.leader >= 0 else -1, []).append(index)
    return out


# --- log dirs --------------------------------------------------------------------------------------
def log_dirs_view(broker: Broker) -> list[LogDirRow]:
    manager = broker.log_manager
    offline = {os.path.abspath(d): why for d, why in manager.offline_dirs.items()}
    cordoned = {os.path.abspath(d) for d in manager.cordoned}
    by_dir: dict[Path, list[int]] = {}  # dir -> [partitions, bytes]
    for partition in broker.partitions.values():
        entry = by_dir.setdefault(partition.log_dir, [0, 0])
        entry[0] += 1
        entry[1] += partition.size_bytes
    held: dict[str, list[int]] = {}
    for directory, (count, size) in by_dir.items():
        entry = held.setdefault(os.path.abspath(directory), [0, 0])
        entry[0] += count
        entry[1] += size
    rows = []
    for directory in broker.log_dirs:
        path = os.path.abspath(directory)
        total, usable = _disk(Path(path)) if path not in offline else (-1, -1)
        count, size = held.get(path, [0, 0])
        reason = offline.get(path, "")
        rows.append(LogDirRow(path, path not in offline and total >= 0, reason or ("unreadable" if total < 0 else ""),
                              path in cordoned, count, size, total, usable))
    return rows


def _disk(path: Path) -> tuple[int, int]:
    try:
        stats = os.statvfs(path)
    except OSError:
        return -1, -1
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
