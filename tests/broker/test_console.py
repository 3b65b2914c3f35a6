"""The console's data assembly (cluster, groups, log dirs), its charts' samples, its listener and
its authentication; the browser tests are in test_console_browser.py."""

from __future__ import annotations

import asyncio
import base64
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from grete.broker.config import BrokerConfig, ConfigError
from grete.broker.console.auth import console_auth
from grete.broker.console.charts import svg_chart
from grete.broker.console.samples import SampleRing
from grete.broker.console.server import parse_console_listener
from grete.broker.console.view import _elsewhere, cluster_view, groups_view, log_dirs_view
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.broker.network.listeners import parse_listeners
from grete.broker.security.delegation_tokens import scram_credential_for
from grete.coordinator.metadata import PartitionMeta, TopicMeta
from grete.coordinator.zookeeper.zk_layout import BrokerInfo, EndPoint
from grete.testing import broker


def test_console_listener_forms() -> None:
    assert parse_console_listener("") is None
    assert parse_console_listener("127.0.0.1:9095") == ("127.0.0.1", 9095)
    assert parse_console_listener("http://0.0.0.0:9095") == ("0.0.0.0", 9095)
    assert parse_console_listener(":9095") == ("127.0.0.1", 9095)  # no host: localhost only
    assert parse_console_listener("http://:9095/") == ("127.0.0.1", 9095)
    for bad in ("https://127.0.0.1:9095", "127.0.0.1", "http://127.0.0.1:9095/console", "127.0.0.1:port"):
        with pytest.raises(ConfigError, match="console.listener"):
            parse_console_listener(bad)


def test_samples_give_rates_and_break_at_gaps() -> None:
    metrics = BrokerMetrics()
    ring = SampleRing()
    ring.take(metrics, 100.0)
    metrics.totals.bytes_in += 1000
    ring.take(metrics, 100.5)  # within a second of the last: not taken
    ring.take(metrics, 102.0)
    metrics.totals.bytes_in += 3000
    ring.take(metrics, 103.0)
    assert ring.lines("bytes_in", 103.0) == [[(1.0, 500.0), (0.0, 3000.0)]]
    metrics.totals.bytes_in += 600
    ring.take(metrics, 163.0)  # nobody looked for a minute: a gap, not an average
    metrics.totals.bytes_in += 600
    ring.take(metrics, 165.0)
    assert ring.lines("bytes_in", 165.0) == [[(63.0, 500.0), (62.0, 3000.0)], [(0.0, 300.0)]]
    assert ring.lines("bytes_in", 165.0, window=10.0) == [[(0.0, 300.0)]]


def test_chart_draws_each_run() -> None:
    assert 'data-points="0"' in svg_chart("Bytes in /s", []) and "collecting" in svg_chart("Bytes in /s", [])
    svg = svg_chart("Bytes in /s", [[(60.0, 10.0), (30.0, 20.0)], [(0.0, 2000.0)]])
    assert svg.count("<polyline") == 2 and 'data-points="3"' in svg and 'data-last="2000.0"' in svg
    assert "2.0k" in svg


def _meta(name: str, partitions: dict[int, PartitionMeta], internal: bool = False) -> TopicMeta:
    return TopicMeta(name, uuid.uuid4(), partitions, internal=internal)


def _stub(node_id: int, live: list[int], controller: int, topics: list[TopicMeta]) -> Any:
    infos = [BrokerInfo(i, (EndPoint("PLAINTEXT", f"h{i}", 9092, "PLAINTEXT"),)) for i in live]
    by_name = {t.name: t for t in topics}
    metadata = SimpleNamespace(cluster_id="c1", topics=lambda: by_name, topic=by_name.get)
    cluster = SimpleNamespace(replicates=True, offline_replicas=lambda meta, index, _listener: list(
        meta.partitions[index].offline_replicas))
    return SimpleNamespace(node_id=node_id, live_brokers=lambda: infos, controller_id=lambda: controller,
                           partitions={}, metadata=metadata, cluster=cluster, advertised=[])


def test_cluster_view_shows_dead_brokers_under_replication_and_offline_partitions() -> None:
    t = _meta("t", {0: PartitionMeta(1, 3, [1, 2], [1]), 1: PartitionMeta(2, 5, [2, 3], [2, 3]),
                    2: PartitionMeta(3, 1, [3, 1], [3, 1])})
    view = cluster_view(_stub(1, [1, 3], 3, [t]))
    assert [(b.id, b.live, b.controller, b.local, b.leaders, b.replicas) for b in view.brokers] == [
        (1, True, False, True, 1, 2), (2, False, False, False, 1, 2), (3, True, True, False, 1, 2)]
    assert view.brokers[1].endpoint == ""  # a broker not live: known only from replica lists
    rows = view.topics[0].partitions
    assert [(p.under_replicated, p.leader_live) for p in rows] == [(True, True), (False, False), (False, True)]
    assert (view.topics[0].under_replicated, view.topics[0].offline, view.topics[0].replication) == (1, 1, 2)
    assert view.controller_id == 3


def test_groups_coordinated_elsewhere_are_named_by_their_broker() -> None:
    offsets = _meta("__consumer_offsets", {0: PartitionMeta(1, 0, [1], [1]), 1: PartitionMeta(2, 0, [2], [2]),
                                           2: PartitionMeta(-1, 0, [3], []), 3: PartitionMeta(2, 0, [2], [2])},
                    internal=True)
    assert _elsewhere(_stub(1, [1, 2], 1, [offsets])) == {2: [1, 3], -1: [2]}


def test_groups_view_lag_and_owner_and_log_dirs() -> None:
    with broker({"console.listener": "127.0.0.1:0"}, topics={"g": 2}) as b:
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0})
        for i in range(10):
            producer.produce("g", value=b"v", partition=i % 2)
        assert producer.flush(10) == 0
        consumers = []
        for group_id, protocol in (("readers", "classic"), ("next", "consumer")):  # KIP-848's too
            consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": group_id,
                                 "group.protocol": protocol, "enable.auto.commit": False,
                                 "auto.offset.reset": "earliest"})
            consumer.subscribe(["g"])
            while consumer.poll(1) is None or not consumer.assignment():
                pass
            consumer.commit(offsets=[TopicPartition("g", 0, 2), TopicPartition("g", 1, 5)], asynchronous=False)
            consumers.append(consumer)
        view = b.call(lambda: groups_view(b.broker))
        dirs = b.call(lambda: log_dirs_view(b.broker))
        for consumer in consumers:
            consumer.close()
    for group_id, kind in (("readers", "classic"), ("next", "consumer")):
        group = next(g for g in view.groups if g.group_id == group_id)
        assert (group.kind, group.state, len(group.members)) == (kind, "Stable", 1)
        assert group.members[0].assigned == "g [0, 1]"
        member = group.members[0].member_id
        assert [(lag.topic, lag.partition, lag.committed, lag.end, lag.lag, lag.owner) for lag in group.lags] == [
            ("g", 0, 2, 5, 3, member), ("g", 1, 5, 5, 0, member)]
        assert group.total_lag == 3
    assert view.elsewhere == {}
    assert len(dirs) == 1 and dirs[0].online and dirs[0].partitions >= 2 and dirs[0].total_bytes > 0


def test_share_group_lag_counts_delivered_records_as_consumed() -> None:
    topic = _meta("s", {0: PartitionMeta(1, 0, [1], [1])})
    group = SimpleNamespace(state="Stable", members={"m": SimpleNamespace(
        member_id="m", client_id="c", client_host="/127.0.0.1", assignment={topic.topic_id: [0]})})

    async def described(group_id: str, keys: object) -> dict[tuple[uuid.UUID, int], tuple[int, int]]:
        return {(topic.topic_id, 0): (4, 3)}  # start offset 4, 3 records past it delivered

    stub = _stub(1, [1], 1, [topic])
    stub.metadata.topic_by_id = lambda topic_id: topic if topic_id == topic.topic_id else None
    stub.cluster = SimpleNamespace(replicates=False)  # the embedded node, a cluster of one
    stub.partitions = {("s", 0): SimpleNamespace(high_watermark=10, is_leader=True)}
    stub.coordinators = lambda: (None, None)
    stub.share_groups = SimpleNamespace(groups={"sg": group}, described=described)
    view = asyncio.run(groups_view(stub))
    [row] = view.groups
    assert (row.kind, row.members[0].assigned) == ("share", "s [0]")
    assert [(lag.committed, lag.end, lag.lag) for lag in row.lags] == [(7, 10, 3)]


def test_secured_broker_needs_a_way_to_authenticate_the_console() -> None:
    def stub(listeners: str, **config: str) -> Any:
        settings = {"listeners": listeners, "listener.security.protocol.map":
                    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", **config}
        return SimpleNamespace(config=BrokerConfig(settings), listeners=parse_listeners(listeners.split(",")))
    assert console_auth(stub("PLAINTEXT://:9092")) is None
    with pytest.raises(ConfigError, match="console.authentication=none"):
        console_auth(stub("SSL://:9093"))
    assert console_auth(stub("SSL://:9093", **{"console.authentication": "none"})) is None
    with pytest.raises(ConfigError, match="no SASL listener"):
        console_auth(stub("PLAINTEXT://:9092", **{"console.authentication": "basic"}))
    with pytest.raises(ConfigError, match="console.authentication"):
        console_auth(stub("PLAINTEXT://:9092", **{"console.authentication": "sometimes"}))


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" '
        'user_carol="carol-secret";')
SECURED = {
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
    "security.inter.broker.protocol": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:scrammy",
    "console.listener": "127.0.0.1:0",
}


def _get(port: int, user: str | None = None, password: str = "") -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/")
    if user is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert b"grete console" in answer.read()
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            assert exc.headers["WWW-Authenticate"].startswith('Basic realm="grete console"')
        return exc.code


def test_console_on_a_sasl_broker_asks_for_its_users(tmp_path: Path) -> None:
    with broker(SECURED) as b:
        credential = scram_credential_for("SCRAM-SHA-256", "scram-secret", iterations=4096)
        b.call(lambda: b.broker.metadata.set_scram_credential("scrammy", "SCRAM-SHA-256", credential))
        port = b.node.console.port
        assert _get(port) == 401
        assert _get(port, "admin", "wrong") == 401
        assert _get(port, "nobody", "admin-secret") == 401
        assert _get(port, "admin", "admin-secret") == 200      # PLAIN's JAAS user
        assert _get(port, "scrammy", "scram-secret") == 200    # a SCRAM credential
        assert _get(port, "scrammy", "admin-secret") == 401
        assert _get(port, "carol", "carol-secret") == 403      # authenticated, no DESCRIBE on the cluster
