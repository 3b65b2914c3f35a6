"""What the cluster compat tests share: admin calls, Kafka 3.9.2's CLI tools pointed at a cluster,
ZooKeeper snapshots and the normalisation that keeps only what must agree between grete and Kafka."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from tools import kafka_dist

TOOLS_VERSION = "3.9.2"


def unique(prefix: str = "c") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(condition: Callable[[], Any], timeout: float = 30.0, what: str = "condition",
               interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            value = condition()
        except Exception as exc:  # a broker going away mid-call: try again
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last!r})")
        time.sleep(interval)


def silent_logger() -> object:
    import logging

    log = logging.getLogger("grete.compat.cluster.librdkafka")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    return log


def admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": silent_logger()})


# --- what clients see ------------------------------------------------------------------------

@dataclass(frozen=True)
class PartitionView:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


def metadata(bootstrap: str, topic: str | None = None, timeout: float = 10.0) -> Any:
    return admin(bootstrap).list_topics(topic=topic, timeout=timeout)


def partitions_seen(bootstrap: str, topic: str) -> dict[int, PartitionView] | None:
    """Partition -> (leader, replicas, ISR) in a Metadata answer; None while the topic has an error."""
    md = metadata(bootstrap, topic)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return None
    return {p: PartitionView(v.leader, tuple(v.replicas), tuple(v.isrs)) for p, v in t.partitions.items()}


def await_full_isrs(cluster: Any, bootstrap: str, replicas: set[int], timeout: float = 30.0) -> None:
    """Until every partition of every topic lists ``replicas`` as its ISR. On a timeout the failure
    names the partitions short of it and, from each grete broker's log, its last ISR changes."""
    short: list[str] = []

    def full() -> bool:
        short[:] = [f"{name}-{p}: leader {v.leader}, ISR {sorted(v.isrs)}"
                    for name, t in metadata(bootstrap).topics.items() for p, v in sorted(t.partitions.items())
                    if set(v.isrs) != replicas]
        return not short

    try:
        wait_until(full, timeout, f"ISRs of {sorted(replicas)} everywhere")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; short: {short}{_isr_log_lines(cluster)}") from None


def _isr_log_lines(cluster: Any) -> str:
    directory = getattr(cluster, "directory", None)
    if directory is None:
        return ""
    lines = []
    for log_path in sorted(Path(directory).glob("broker-*.log")):
        text = log_path.read_text(errors="replace").splitlines()
        lines += [f"{log_path.name}: {line}" for line in text if "ISR" in line or "AlterPartition" in line][-15:]
    return "\n" + "\n".join(lines)


def create_topic(bootstrap: str, name: str, partitions: int = 3, replication: int = 3,
                 config: dict[str, str] | None = None, timeout: float = 60.0) -> dict[int, PartitionView]:
    """CreateTopics through AdminClient; returns once every partition has a leader and a full ISR."""
    from confluent_kafka.admin import NewTopic

    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication,
                                             config=dict(config or {}))], operation_timeout=timeout)
    futures[name].result(timeout=timeout)
    # Every broker learns the topic from its own UpdateMetadata: wait until each one answers with it.
    views = [wait_until(lambda one=one: _complete(one, name, partitions, replication), timeout,
                        f"{name} on {one}: {partitions} partitions with leaders and {replication} in-sync replicas")
             for one in bootstrap.split(",")]
    return views[0]


def _complete(bootstrap: str, name: str, partitions: int, replication: int) -> dict[int, PartitionView] | None:
    seen = partitions_seen(bootstrap, name)
    if seen is None or len(seen) != partitions:
        return None
    if all(v.leader >= 0 and len(v.isr) == replication for v in seen.values()):
        return seen
    return None


def describe_topic(bootstrap: str, name: str) -> Any:
    """AdminClient.describe_topics: TopicDescription (name, topic_id, partitions with leader/replicas/isr)."""
    from confluent_kafka import TopicCollection

    client = admin(bootstrap)  # held: a collected client cancels its futures
    return client.describe_topics(TopicCollection([name]))[name].result(timeout=30)


def describe_cluster(bootstrap: str) -> Any:
    client = admin(bootstrap)
    return client.describe_cluster().result(timeout=30)


# --- Kafka 3.9.2's CLI tools ------------------------------------------------------------------

def tool(name: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return kafka_dist.run_tool(TOOLS_VERSION, name, *args, timeout=timeout)


def tool_ok(name: str, *args: str, timeout: float = 120.0) -> str:
    done = tool(name, *args, timeout=timeout)
    assert done.returncode == 0, (f"{name} {' '.join(args)} exited {done.returncode}\n"
                                  f"stdout: {done.stdout[-3000:]}\nstderr: {done.stderr[-3000:]}")
    return done.stdout


def parse_topics_describe(out: str) -> dict[str, Any]:
    """kafka-topics --describe output -> {"topic": {...}, "partitions": {p: {"Leader": .., ...}}}."""
    result: dict[str, Any] = {"topic": None, "partitions": {}}
    for line in out.splitlines():
        fields = _fields(line)
        if "Partition" in fields:
            result["partitions"][int(fields["Partition"])] = fields
        elif "TopicId" in fields:
            result["topic"] = fields
    return result


def _fields(line: str) -> dict[str, str]:
    """'Topic: t\tTopicId: x\tPartitionCount: 3 ...' -> {'Topic': 't', 'TopicId': 'x', ...}."""
    fields: dict[str, str] = {}
    for part in line.strip().split("\t"):
        if ":" in part:
            key, _, value = part.partition(":")
            fields[key.strip()] = value.strip()
    return fields


def int_list(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


# --- ZooKeeper ---------------------------------------------------------------------------------

def zk_client(connect: str) -> KazooClient:
    client = KazooClient(hosts=connect)
    client.start(10)
    return client


@dataclass(frozen=True)
class Znode:
    ephemeral: bool
    data: bytes | None
    version: int


def snapshot(zk: KazooClient, root: str = "/") -> dict[str, Znode]:
    """Every znode under ``root`` (ZooKeeper's own /zookeeper subtree left out)."""
    nodes: dict[str, Znode] = {}

    def walk(path: str) -> None:
        if path == "/zookeeper":
            return
        data, stat = zk.get(path)
        nodes[path] = Znode(bool(stat.ephemeralOwner), data, stat.version)
        for child in sorted(zk.get_children(path)):
            walk(path.rstrip("/") + "/" + child)

    walk(root)
    return nodes


def loads(data: bytes | None) -> Any:
    if data is None or data == b"":
        return None
    return json.loads(data)


def type_shape(value: Any) -> Any:
    """The JSON structure with every leaf replaced by its type name (dict keys kept)."""
    if isinstance(value, dict):
        return {k: type_shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [type_shape(v) for v in value[:1]] if value else []
    return type(value).__name__


def sequential_pattern(path: str) -> str:
    """'/config/changes/config_change_0000000003' -> '/config/changes/config_change_<seq>'."""
    head, _, tail = path.rpartition("/")
    stem = tail.rstrip("0123456789")
    if stem != tail and len(tail) - len(stem) == 10:
        return f"{head}/{stem}<seq>"
    return path


def config_changes(zk: KazooClient) -> list[dict[str, Any]]:
    """The /config/changes notifications in sequence order, as JSON."""
    names = sorted(zk.get_children("/config/changes"))
    return [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in names]


def topic_configs_on(host: str, port: int, topic: str) -> dict[str, str | None]:
    """DescribeConfigs (v4) for a topic sent to one broker, on its own connection: that broker's view."""
    from grete.protocol.messages import DescribeConfigsRequest, DescribeConfigsResponse
    from grete.testing import _wire

    request = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=None)])
    response = _wire.call(host, port, request, DescribeConfigsResponse, 4)
    (result,) = response.results
    assert result.error_code == 0, (result.error_code, result.error_message)
    return {c.name: c.value for c in result.configs}


def produce_one(bootstrap: str, topic: str, partition: int, value: bytes, timeout: float = 30.0,
                key: bytes | None = None) -> Any:
    """Produce one record with acks=all; returns the delivery error (None when delivered)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.max.bytes": 10_000_000,
                         "retries": 0, "log_level": 0, "logger": silent_logger()})
    outcome: list[Any] = []
    producer.produce(topic, key=key, value=value, partition=partition, on_delivery=lambda err, _m: outcome.append(err))
    producer.flush(timeout)
    assert outcome, "no delivery report"
    return outcome[0]


def zk_json(zk: KazooClient, path: str) -> Any:
    return json.loads(zk.get(path)[0])


def kafka_topic_id(topic_id: Any) -> str:
    """confluent-kafka's Uuid (printed in standard base64) as Kafka writes it (URL-safe, no padding)."""
    return str(topic_id).replace("+", "-").replace("/", "_").rstrip("=")
