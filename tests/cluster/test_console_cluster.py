"""The console of a two-broker cluster in a real browser (Debian's headless Chromium): each broker's
page shows the whole cluster as the metadata cache knows it, matching the Admin API; a killed broker
shows as down and its partitions' new leaders appear. Screenshots go to $GRETE_CONSOLE_SCREENSHOTS
when set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from grete.testing.cluster import cluster, free_port
from tests.chromium import data_elements, dump_dom, need_chromium, screenshot
from tests.cluster.conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

pytestmark = pytest.mark.slow

TOPIC = "replicated"


def _admin_partitions(admin: AdminClient) -> dict[int, tuple[int, str, str]]:
    meta = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    return {p.id: (p.leader, ",".join(map(str, p.replicas)), ",".join(map(str, p.isrs)))
            for p in meta.partitions.values()}


def _page_partitions(html: str) -> dict[int, tuple[int, str, str]]:
    return {int(r["partition"]): (int(r["leader"]), r["replicas"], r["isr"])
            for r in data_elements(html, "partition") if r.get("topic") == TOPIC and "leader" in r}


def _statuses(html: str) -> dict[int, str]:
    return {int(b["broker"]): b["status"] for b in data_elements(html, "broker")}


def test_console_shows_the_cluster_and_a_killed_broker_down(tmp_path: Path) -> None:
    need_chromium()
    need_zookeeper()
    ports = {1: free_port(), 2: free_port()}
    consoles = {i: {"console.listener": f"127.0.0.1:{port}"} for i, port in ports.items()}
    with cluster(2, overrides=CLUSTER_OVERRIDES, broker_overrides=consoles) as running:
        admin = AdminClient({"bootstrap.servers": running.brokers[1].bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, 2, replication_factor=2)])[TOPIC].result(30)
        wait_until(lambda: all(isr.count(",") == 1 for _, _, isr in _admin_partitions(admin).values()),
                   what="full ISRs")
        for broker_id in (1, 2):  # every broker's console shows the whole cluster
            page = dump_dom(f"http://127.0.0.1:{ports[broker_id]}/")
            assert _statuses(page) == {1: "up", 2: "up"}
            assert _page_partitions(page) == _admin_partitions(admin)

        running.kill_broker(2)
        wait_until(lambda: 2 not in admin.list_topics(timeout=5).brokers
                   and all(leader == 1 for leader, _, _ in _admin_partitions(admin).values()),
                   what="broker 2 out of broker 1's metadata, broker 1 leading")
        url = f"http://127.0.0.1:{ports[1]}/"
        page = dump_dom(url)
        assert _statuses(page) == {1: "up", 2: "down"}
        assert _page_partitions(page) == _admin_partitions(admin)
        shots = Path(os.environ.get("GRETE_CONSOLE_SCREENSHOTS", tmp_path))
        screenshot(url, shots / "console-cluster-broker-down.png")
