"""A broker of a ZooKeeper cluster stopped with SIGTERM exits 0 (kafka-server-stop's clean
shutdown), also while a fetch is parked on it: the stop wakes that fetch after the log manager has
closed the logs, and the late read must not pass for a failed log dir (which would exit 1)."""

from __future__ import annotations

import threading
import urllib.request

from confluent_kafka import Producer

from grete.protocol.messages import FetchRequest, FetchResponse
from grete.testing import _wire
from grete.testing.cluster import GreteCluster, cluster, free_port

from .conftest import CLUSTER_OVERRIDES, need_zookeeper, wait_until

FETCH_VERSION = 12


def _parked_fetch(topic: str) -> FetchRequest:
    """A consumer's fetch from offset 0 wanting more bytes than the partition has: it waits."""
    wanted = FetchRequest.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                         log_start_offset=-1, partition_max_bytes=1 << 20)
    return FetchRequest(replica_id=-1, max_wait_ms=30_000, min_bytes=50 << 20, max_bytes=50 << 20,
                        isolation_level=0, session_id=0, session_epoch=-1,
                        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[wanted])])


def _consumer_fetches(running: GreteCluster) -> float:
    """FetchConsumer requests received (counted as they arrive, before the handler runs)."""
    url = running.broker_items(1)["metrics.listener"] + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as answer:
        lines = answer.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith('kafka_network_requestmetrics_requests_total{request="FetchConsumer"'))


def test_sigterm_with_a_parked_fetch_exits_0(topic_name: str) -> None:
    need_zookeeper()
    overrides = {**CLUSTER_OVERRIDES, "controlled.shutdown.max.retries": "0"}
    metrics = {1: {"metrics.listener": f"http://127.0.0.1:{free_port()}"}}
    with cluster(1, overrides=overrides, broker_overrides=metrics) as running:
        broker = running.brokers[1]
        broker.create_topic(topic_name)
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
        for _ in range(5):
            producer.produce(topic_name, b"record" * 20)
        assert producer.flush(30) == 0
        answers: list[BaseException | FetchResponse] = []

        def fetch() -> None:
            try:
                answers.append(_wire.call(broker.host, broker.port, _parked_fetch(topic_name), FetchResponse,
                                          FETCH_VERSION, timeout=60))
            except OSError as exc:  # the stop closes the connection: no answer
                answers.append(exc)
        fetching = threading.Thread(target=fetch, daemon=True)
        fetching.start()
        # Its handler ran as it arrived (the loop answers the scrape after it): unanswered, it is parked.
        wait_until(lambda: _consumer_fetches(running) >= 1, what="the fetch to reach the broker")
        assert not answers, answers
        assert running.stop_broker(1) == 0, broker.log()[-3000:]
        fetching.join(10)
        assert "is offline" not in broker.log()
