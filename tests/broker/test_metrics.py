"""GET /metrics: Kafka's metric names as the JMX exporter writes them, counted from real traffic,
and consumer lag computed on the broker."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from grete.broker.config import ConfigError
from grete.broker.metrics.broker_metrics import Histogram
from grete.broker.metrics.metrics_http import parse_metrics_listener
from grete.protocol.messages import FetchRequest, FetchResponse
from grete.testing import _wire, broker


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text = answer.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_endpoint_counts_traffic_and_lag() -> None:
    with broker({"metrics.listener": "http://127.0.0.1:0"}, topics={"m": 2}) as b:
        port = b.node.metrics_server.port
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0})
        for i in range(10):
            producer.produce("m", value=b"v" * 100, partition=i % 2)
        assert producer.flush(10) == 0
        consumer = Consumer({"bootstrap.servers": b.bootstrap_servers, "group.id": "g",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        consumer.assign([TopicPartition("m", 0, 0)])
        read = 0
        while read < 5:
            message = consumer.poll(5)
            assert message is not None and message.error() is None
            read += 1
        consumer.commit(offsets=[TopicPartition("m", 0, 3)], asynchronous=False)
        consumer.close()
        # A fetch session of two partitions, as a Java consumer opens one (epoch 0).
        session = FetchRequest(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, session_id=0, session_epoch=0,
                               topics=[FetchRequest.FetchTopic(topic="m", partitions=[FetchRequest.FetchPartition(
                                   partition=p, fetch_offset=0, partition_max_bytes=1024) for p in (0, 1)])])
        assert _wire.call(b.host, b.port, session, FetchResponse, 12).session_id != 0
        s = _scrape(port)
    assert s[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "m"),))] == 10
    assert s[("kafka_server_brokertopicmetrics_messagesin_total", ())] == 10
    assert s[("kafka_server_brokertopicmetrics_bytesin_total", (("topic", "m"),))] > 1000
    assert s[("kafka_server_brokertopicmetrics_bytesout_total", (("topic", "m"),))] > 500
    produce_requests = sum(v for (name, labels), v in s.items()
                           if name == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in labels)
    assert produce_requests >= 1
    assert s[("kafka_network_requestmetrics_errors_total", (("error", "NONE"), ("request", "Produce")))] >= 2
    assert s[("kafka_network_requestmetrics_totaltimems_count", (("request", "Produce"),))] >= 1
    assert ("kafka_network_requestmetrics_totaltimems", (("quantile", "0.99"), ("request", "Produce"))) in s
    # A consumer's fetches as Kafka names them: FetchConsumer, and Fetch (their sum with followers').
    def count(request: str) -> float:
        return s.get(("kafka_network_requestmetrics_totaltimems_count", (("request", request),)), 0)
    assert count("FetchConsumer") >= 2 and count("Fetch") == count("FetchConsumer") and count("FetchFollower") == 0
    assert s[("kafka_network_requestmetrics_errors_total", (("error", "NONE"), ("request", "Fetch")))] >= 2
    assert s[("kafka_server_replicamanager_partitioncount", ())] >= 2
    assert s[("kafka_server_replicamanager_underreplicatedpartitions", ())] == 0
    assert s[("kafka_server_fetchsessioncache_numincrementalfetchsessions", ())] >= 1
    assert s[("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", ())] >= 2
    assert s[("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", ())] == 0
    assert s[("kafka_log_log_size", (("partition", "0"), ("topic", "m")))] > 0
    assert s[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
    # 5 records in partition 0, committed at 3: lag 2.
    assert s[("grete_consumer_group_topic_partition_lag",
              (("group_id", "g"), ("partition_id", "0"), ("topic_name", "m")))] == 2
    assert s[("grete_consumer_group_lag_max", (("group_id", "g"),))] == 2
    assert s[("kafka_server_socket_server_metrics_connection_count", (("listener", "PLAINTEXT"),))] >= 0
    # KIP-612's: connections were made, none throttled (no limit set)
    assert s[("kafka_server_socket_server_metrics_connection_accept_rate", (("listener", "PLAINTEXT"),))] > 0
    assert s[("kafka_server_socket_server_metrics_broker_connection_accept_rate", ())] > 0
    assert s[("kafka_server_socket_server_metrics_connection_accept_throttle_time", (("listener", "PLAINTEXT"),))] == 0
    assert ("process_resident_memory_bytes", ()) in s


def test_other_paths_are_not_found() -> None:
    with broker({"metrics.listener": "http://127.0.0.1:0"}) as b:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{b.node.metrics_server.port}/other", timeout=10)
        assert err.value.code == 404


def test_no_endpoint_by_default_and_bad_listener_refused() -> None:
    with broker() as b:
        assert b.node.metrics_server is None
    assert parse_metrics_listener("") is None
    assert parse_metrics_listener("http://0.0.0.0:9404") == ("0.0.0.0", 9404)
    with pytest.raises(ConfigError):
        parse_metrics_listener("tcp://0.0.0.0:9404")


def test_histogram_quantiles_from_buckets() -> None:
    h: Any = Histogram()
    for value in [0.3] * 90 + [40.0] * 10:
        h.observe(value)
    assert h.quantile(0.5) == 0.5 and h.quantile(0.95) == 50.0 and h.count == 100


def test_quota_series() -> None:
    """kafka.server:type=Produce,user=...,client-id=... byte-rate and throttle-time, as the JMX
    exporter names them, for a client over its producer_byte_rate."""
    from tools.kafka_admin import alter_client_quotas

    with broker({"metrics.listener": "http://127.0.0.1:0"}, topics={"q": 1}) as b:
        alter_client_quotas(b.bootstrap_servers, {"client-id": "metered"}, {"producer_byte_rate": 5000.0})
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "client.id": "metered", "linger.ms": 0})
        for _ in range(3):
            producer.produce("q", value=b"v" * 20_000)
            assert producer.flush(10) == 0
        s = _scrape(b.node.metrics_server.port)
    labels = (("clientId", "metered"), ("resource", "Produce"), ("user", ""))
    # Three requests of a little over 20 kB (records, batch and request headers) over the span of a
    # young sensor, 10 s plus the e < 1 s elapsed since its first record: ~60300 / (10 + e) B/s;
    # the third request's throttle, (O - T) / T x span, is (60300 - 5000 (10 + e)) / 5000 s = 2.06 - e s.
    assert 5000 < s[("kafka_server_quota_byte_rate", labels)] < 6200
    assert 900 < s[("kafka_server_quota_throttle_time", labels)] < 2200
