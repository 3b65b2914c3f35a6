"""What the faults and the heal read of a cluster's state: which broker leads a partition and its
ISR, which node is the controller, which brokers are registered. On a ZooKeeper cluster it is read
from ZooKeeper itself (``ZkView``, a direct session, not proxied); a KRaft cluster has no such
store the checker can read, so ``KraftView`` asks the brokers (Metadata: leader, leader epoch,
ISR, the unfenced brokers) and the quorum (DescribeQuorum: its leader is the controller)."""

from __future__ import annotations

import json
from typing import Any, Protocol

from kazoo.client import KazooClient

from grete.protocol.messages import MetadataRequest, MetadataResponse
from grete.testing import _wire
from grete.testing.cluster import _stopped

METADATA_VERSION = 9
ASK_TIMEOUT_S = 2.0


class View(Protocol):
    def partition_state(self, topic: str, partition: int) -> dict[str, Any]:
        """``{"leader": id, "isr": [ids], ...}`` (ZooKeeper's state znode's keys)."""

    def controller(self) -> int:
        """The active controller's id, -1 if none is known."""

    def registered(self) -> set[int]:
        """The broker ids registered (in KRaft: registered and unfenced)."""

    def unsettled(self, topic: str) -> list[str]:
        """The partitions of ``topic`` not yet led with a full ISR, each with why (none if the
        topic does not exist)."""

    def close(self) -> None: ...


class ZkView:
    def __init__(self, connect: str) -> None:
        self.zk = KazooClient(hosts=connect)
        self.zk.start(10)

    def partition_state(self, topic: str, partition: int) -> dict[str, Any]:
        data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        found: dict[str, Any] = json.loads(data)
        return found

    def controller(self) -> int:
        try:
            return int(json.loads(self.zk.get("/controller")[0])["brokerid"])
        except Exception:
            return -1

    def registered(self) -> set[int]:
        return {int(b) for b in self.zk.get_children("/brokers/ids")}

    def unsettled(self, topic: str) -> list[str]:
        if not self.zk.exists(f"/brokers/topics/{topic}"):
            return []
        missing = []
        assignment = json.loads(self.zk.get(f"/brokers/topics/{topic}")[0])["partitions"]
        for p, replicas in assignment.items():
            try:
                state = self.partition_state(topic, int(p))
            except Exception:
                missing.append(f"{topic}-{p}: no state")
                continue
            if state["leader"] < 0 or sorted(state["isr"]) != sorted(replicas):
                missing.append(f"{topic}-{p}: leader {state['leader']} isr {state['isr']}")
        return missing

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()


class KraftView:
    """Each running, unpaused broker's Metadata. A partition's state is the one with the highest
    leader epoch any broker reports (a broker that has not replayed the latest change reports an
    older one); a topic is settled only when every broker asked sees it led with a full ISR, so the
    next round starts with every broker's image caught up."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster

    def _answers(self, topics: list[str] | None) -> dict[int, Any]:
        request = MetadataRequest(topics=None if topics is None else [
            MetadataRequest.MetadataRequestTopic(name=t) for t in topics])
        out = {}
        for broker_id, broker in sorted(self.cluster.brokers.items()):
            if broker.process.poll() is not None or _stopped(broker.process.pid):  # a paused one answers nothing
                continue
            try:
                out[broker_id] = _wire.call(broker.host, broker.port, request, MetadataResponse, METADATA_VERSION,
                                            timeout=ASK_TIMEOUT_S)
            except OSError:
                continue
        return out

    def partition_state(self, topic: str, partition: int) -> dict[str, Any]:
        best: dict[str, Any] | None = None
        for answer in self._answers([topic]).values():
            for t in answer.topics:
                for p in t.partitions:
                    if t.error_code == 0 and p.partition_index == partition and p.error_code in (0, 5, 9) and \
                            (best is None or p.leader_epoch > best["leader_epoch"]):
                        best = {"leader": p.leader_id, "leader_epoch": p.leader_epoch, "isr": list(p.isr_nodes),
                                "replicas": list(p.replica_nodes)}
        if best is None:
            raise LookupError(f"no broker answered with the state of {topic}-{partition}")
        return best

    def controller(self) -> int:
        return int(self.cluster.quorum.leader())

    def registered(self) -> set[int]:
        """The brokers every broker asked lists (Metadata lists the unfenced ones)."""
        answers = self._answers([])
        if not answers:
            return set()
        return set.intersection(*({b.node_id for b in a.brokers} for a in answers.values()))

    def unsettled(self, topic: str) -> list[str]:
        missing = []
        answers = self._answers([topic])
        if not answers:
            return [f"{topic}: no broker answers"]
        for broker_id, answer in answers.items():
            for t in answer.topics:
                if t.error_code == 3:  # UNKNOWN_TOPIC_OR_PARTITION: not created (yet, or at all)
                    continue
                for p in t.partitions:
                    if p.leader_id < 0 or sorted(p.isr_nodes) != sorted(p.replica_nodes):
                        missing.append(f"{topic}-{p.partition_index} at broker {broker_id}: leader {p.leader_id} "
                                       f"isr {list(p.isr_nodes)}")
        return missing

    def close(self) -> None:
        pass
