"""Cluster metadata behind one interface: topics, partitions, leader epochs, configs, cluster id.

``LocalMetadataStore`` keeps it in one JSON file in the first log dir (the embedded single-node
default, no ZooKeeper). A ZooKeeper-backed store implements the same interface for clusters.
Every mutation is written atomically (temp file, fsync, rename) before it is acknowledged, so topic
ids and leader epochs survive restarts: Java clients ignore metadata whose leader epoch goes back.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from grete.storage.files import atomic_write, uuid_from_kafka, uuid_to_kafka

METADATA_FILE = "grete-metadata.json"


def new_topic_id() -> uuid.UUID:
    """A random id that Kafka would accept: never the zero id, never base64 starting with '-'."""
    while True:
        candidate = uuid.uuid4()
        if not uuid_to_kafka(candidate).startswith("-"):
            return candidate


@dataclass(slots=True)
class PartitionMeta:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


@dataclass(slots=True)
class TopicMeta:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionMeta]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


class TopicExists(Exception):
    pass


class NoSuchTopic(Exception):
    pass


class MetadataStore(Protocol):
    cluster_id: str

    def topics(self) -> dict[str, TopicMeta]: ...
    def topic(self, name: str) -> TopicMeta | None: ...
    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None: ...
    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                     internal: bool = False) -> TopicMeta: ...
    def delete_topic(self, name: str) -> TopicMeta: ...
    def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMeta: ...
    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None: ...
    def broker_configs(self) -> dict[str, str]: ...
    def set_broker_configs(self, configs: dict[str, str]) -> None: ...
    def allocate_producer_ids(self, count: int) -> int: ...


class LocalMetadataStore:
    """Single-node metadata in ``<log dir>/grete-metadata.json``; every broker id is this node."""

    def __init__(self, directory: Path, *, cluster_id: str | None = None) -> None:
        self.path = directory / METADATA_FILE
        self._topics: dict[str, TopicMeta] = {}
        self._by_id: dict[uuid.UUID, TopicMeta] = {}
        self._broker_configs: dict[str, str] = {}
        self._next_producer_id = 0
        if self.path.exists():
            self._load()
        else:
            self.cluster_id = cluster_id or uuid_to_kafka(new_topic_id())
            directory.mkdir(parents=True, exist_ok=True)
            self._save()

    # --- reads ---------------------------------------------------------------------------------
    def topics(self) -> dict[str, TopicMeta]:
        return self._topics

    def topic(self, name: str) -> TopicMeta | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicMeta | None:
        return self._by_id.get(topic_id)

    def broker_configs(self) -> dict[str, str]:
        return dict(self._broker_configs)

    # --- writes --------------------------------------------------------------------------------
    def create_topic(self, name: str, assignment: dict[int, list[int]], configs: dict[str, str],
                     internal: bool = False) -> TopicMeta:
        if name in self._topics:
            raise TopicExists(name)
        meta = TopicMeta(name, new_topic_id(), {}, dict(configs), internal)
        for index, replicas in sorted(assignment.items()):
            meta.partitions[index] = PartitionMeta(replicas[0], 0, list(replicas), list(replicas))
        self._topics[name] = meta
        self._by_id[meta.topic_id] = meta
        self._save()
        return meta

    def delete_topic(self, name: str) -> TopicMeta:
        meta = self._topics.pop(name, None)
        if meta is None:
            raise NoSuchTopic(name)
        del self._by_id[meta.topic_id]
        self._save()
        return meta

    def add_partitions(self, name: str, assignment: dict[int, list[int]]) -> TopicMeta:
        meta = self._topics.get(name)
        if meta is None:
            raise NoSuchTopic(name)
        for index, replicas in sorted(assignment.items()):
            meta.partitions[index] = PartitionMeta(replicas[0], 0, list(replicas), list(replicas))
        self._save()
        return meta

    def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        meta = self._topics.get(name)
        if meta is None:
            raise NoSuchTopic(name)
        meta.configs = dict(configs)
        self._save()

    def set_broker_configs(self, configs: dict[str, str]) -> None:
        self._broker_configs = dict(configs)
        self._save()

    def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` producer ids; persisted first, so ids never repeat after a restart."""
        first = self._next_producer_id
        self._next_producer_id += count
        self._save()
        return first

    # --- persistence ---------------------------------------------------------------------------
    def _load(self) -> None:
        data = json.loads(self.path.read_text(encoding="utf-8"))
        self.cluster_id = data["cluster_id"]
        self._broker_configs = dict(data.get("broker_configs", {}))
        self._next_producer_id = int(data.get("next_producer_id", 0))
        for raw in data["topics"]:
            meta = TopicMeta(
                raw["name"], uuid_from_kafka(raw["topic_id"]),
                {int(p): PartitionMeta(v["leader"], v["leader_epoch"], v["replicas"], v["isr"])
                 for p, v in raw["partitions"].items()},
                dict(raw.get("configs", {})), bool(raw.get("internal", False)))
            self._topics[meta.name] = meta
            self._by_id[meta.topic_id] = meta

    def _save(self) -> None:
        data = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "broker_configs": self._broker_configs,
            "next_producer_id": self._next_producer_id,
            "topics": [
                {"name": t.name, "topic_id": uuid_to_kafka(t.topic_id), "internal": t.internal,
                 "configs": t.configs,
                 "partitions": {str(p): {"leader": m.leader, "leader_epoch": m.leader_epoch,
                                         "replicas": m.replicas, "isr": m.isr}
                                for p, m in sorted(t.partitions.items())}}
                for t in sorted(self._topics.values(), key=lambda t: t.name)
            ],
        }
        atomic_write(self.path, json.dumps(data, indent=1).encode("utf-8"))
