"""A streams group's topology (KIP-1071) and what it means against the cluster's topics, free of I/O.

A Kafka Streams application sends its topology on its first heartbeat: subtopologies, each reading
source topics (user topics) and repartition source topics (internal), writing repartition sink
topics, and keeping state in changelog topics (internal). ``configure`` checks it against the topics
that exist, as Kafka 4.3.1's InternalTopicManager does:

* a missing source topic: status MISSING_SOURCE_TOPICS, nothing assigned;
* the partition counts of internal topics: a repartition topic with no fixed count takes the largest
  count of the source topics of the subtopologies writing to it (repeated until every one is known);
  co-partitioned topics must agree (INCORRECTLY_PARTITIONED_TOPICS), a flexible repartition topic
  among them takes their count; a changelog topic has one partition per task of its subtopology;
* a subtopology has as many tasks as its largest source (or repartition source) topic has partitions;
* internal topics that do not exist are returned to be created (status MISSING_INTERNAL_TOPICS until
  they are), an existing one of another size is INCORRECTLY_PARTITIONED_TOPICS.

Only a topology without any of these statuses is *ready*: then tasks are assigned.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

# topic name -> (topic id, number of partitions), for the topics that exist
TopicView = Mapping[str, tuple[uuid.UUID, int]]

# Kafka's StreamsGroupHeartbeatResponse.Status codes.
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int = 0              # 0: decided by the coordinator
    replication_factor: int = 0      # 0: the broker's default
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    """Indexes into the subtopology's source topics, source regexes and repartition source topics."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()

    def inputs(self) -> tuple[str, ...]:
        """Every topic the subtopology's tasks read, user and internal."""
        return self.source_topics + tuple(t.name for t in self.repartition_source_topics)


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def internal_topics(self) -> dict[str, TopicInfo]:
        found: dict[str, TopicInfo] = {}
        for sub in self.subtopologies:
            for info in sub.repartition_source_topics + sub.state_changelog_topics:
                found[info.name] = info
        return found

    def required_topics(self) -> set[str]:
        """The topics whose existence and size decide the configuration (what a change of them
        re-checks)."""
        names = set(self.internal_topics())
        for sub in self.subtopologies:
            names.update(sub.source_topics)
        return names


@dataclass(frozen=True, slots=True)
class Configured:
    """The topology checked against the topics: tasks per subtopology when ready, the internal topics
    to create, and the statuses to report."""

    tasks: dict[str, int] = field(default_factory=dict)
    to_create: tuple[TopicInfo, ...] = ()
    statuses: tuple[tuple[int, str], ...] = ()

    @property
    def ready(self) -> bool:
        return not self.statuses


class _Misconfigured(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail


def _summary(names: set[str] | list[str]) -> str:
    return ", ".join(sorted(names))


def configure(topology: Topology, view: TopicView) -> Configured:
    try:
        missing = sorted({t for sub in topology.subtopologies for t in sub.source_topics if t not in view})
        if missing:
            raise _Misconfigured(MISSING_SOURCE_TOPICS, f"Source topics {_summary(missing)} are missing.")
        decided = _repartition_counts(topology, view)
        _enforce_copartitioning(topology, view, decided)

        def count(topic: str) -> int:
            return view[topic][1] if topic in view else decided[topic]

        tasks = {sub.subtopology_id: max((count(t) for t in sub.inputs()), default=0) for sub in topology.subtopologies}
        for sub in topology.subtopologies:
            for info in sub.state_changelog_topics:
                decided[info.name] = tasks[sub.subtopology_id]
        to_create = []
        for name, info in topology.internal_topics().items():
            wanted = decided.get(name, info.partitions)
            if name in view:
                if view[name][1] != wanted:
                    raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                                         f"Existing topic {name} has different number of partitions: expected "
                                         f"{wanted}, found {view[name][1]}")
            else:
                to_create.append(TopicInfo(name, wanted, info.replication_factor, info.configs))
    except _Misconfigured as exc:
        return Configured(statuses=((exc.code, exc.detail),))
    if to_create:
        detail = f"Internal topics are missing: {', '.join(java_hash_order([t.name for t in to_create]))}"
        return Configured(tasks, tuple(to_create), ((MISSING_INTERNAL_TOPICS, detail),))
    return Configured(tasks)


def java_hash_order(names: list[str]) -> list[str]:
    """The order a java.util.HashMap of these keys iterates in (bucket by String.hashCode spread, then
    insertion), which is the order Kafka 4.3.1 lists missing internal topics in."""
    size = 16
    while len(names) > size * 3 // 4:
        size *= 2

    def bucket(name: str) -> int:
        h = 0
        for ch in name:  # topic names are ASCII: one UTF-16 unit per character, as Java hashes them
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (size - 1)

    return [n for _, _, n in sorted((bucket(n), i, n) for i, n in enumerate(names))]


def _repartition_counts(topology: Topology, view: TopicView) -> dict[str, int]:
    """Kafka's RepartitionTopics.setup: fixed counts first, then the flexible ones from the
    subtopologies writing to them, until nothing changes."""
    decided = {info.name: info.partitions for sub in topology.subtopologies
               for info in sub.repartition_source_topics if info.partitions > 0}
    flexible = {info.name for sub in topology.subtopologies for info in sub.repartition_source_topics
                if info.partitions <= 0 and info.name not in decided}
    writers = {name: [sub for sub in topology.subtopologies if name in sub.repartition_sink_topics]
               for name in flexible}
    progress = True
    while progress and flexible - decided.keys():
        progress = False
        for name in sorted(flexible - decided.keys()):
            counts = [view[t][1] if t in view else decided.get(t, 0) for sub in writers[name] for t in sub.inputs()]
            if counts and max(counts) > 0:
                decided[name] = max(counts)
                progress = True
    undecided = flexible - decided.keys()
    if undecided:
        raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                             f"Number of partitions could not be decided for repartition topics {_summary(undecided)}")
    return decided


def _enforce_copartitioning(topology: Topology, view: TopicView, decided: dict[str, int]) -> None:
    """Kafka's CopartitionedTopicsEnforcer: the user topics of a copartition group must have one
    partition count; its flexible repartition topics take it (or the largest fixed one's)."""
    fixed_repartition = {info.name for sub in topology.subtopologies for info in sub.repartition_source_topics
                         if info.partitions > 0}
    for sub in topology.subtopologies:
        for group in sub.copartition_groups:
            names = [sub.source_topics[i] for i in group.source_topics if 0 <= i < len(sub.source_topics)]
            repartition = [sub.repartition_source_topics[i].name for i in group.repartition_source_topics
                           if 0 <= i < len(sub.repartition_source_topics)]
            user_counts = {t: view[t][1] for t in names if t in view}
            if len(set(user_counts.values())) > 1:
                # Java's toString of a HashMap inside a list, as Kafka 4.3.1 words it.
                listed = ", ".join(f"{t}={user_counts[t]}" for t in java_hash_order(list(user_counts)))
                raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                                     f"Following topics do not have the same number of partitions: [{{{listed}}}]")
            if user_counts:
                target = next(iter(user_counts.values()))
            else:
                fixed = [decided[t] for t in repartition if t in fixed_repartition]
                target = max(fixed, default=max((decided.get(t, 0) for t in repartition), default=0))
            for t in repartition:
                if t in fixed_repartition:
                    if decided[t] != target:
                        raise _Misconfigured(INCORRECTLY_PARTITIONED_TOPICS,
                                             f"Number of partitions {decided[t]} of repartition topic {t} does not "
                                             f"match the number of partitions {target} of its copartitioned topics.")
                elif target > 0:
                    decided[t] = target
