"""``GET /metrics`` on ``metrics.listener`` (``http://HOST:PORT``): the broker's state in Prometheus'
text format, under the names Kafka's metrics get through the Prometheus JMX exporter's Kafka
configuration (so existing dashboards work), plus consumer lag, which Kafka does not export.

Everything is read on scrape by :class:`KafkaCollector`, from the plain counters of
:mod:`grete.broker.metrics.broker_metrics` and from the broker's own state (partitions, metadata, groups): the hot
path pays nothing for exposition. The HTTP side is a few lines of asyncio on the broker's loop, so a
scrape reads state from the thread that owns it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from grete.broker.broker import Broker
from grete.broker.config import ConfigError
from grete.broker.metrics.broker_metrics import PHASES, Histogram
from grete.broker.quotas.client_quotas import FETCH_RATE, PRODUCE_RATE, REQUEST_PERCENTAGE
from grete.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# Kafka's quota types, the ``type`` of kafka.server's quota MBeans.
QUOTA_RESOURCES = {PRODUCE_RATE: "Produce", FETCH_RATE: "Fetch", REQUEST_PERCENTAGE: "Request"}
QUANTILES = (("0.50", 0.50), ("0.75", 0.75), ("0.95", 0.95), ("0.98", 0.98), ("0.99", 0.99), ("0.999", 0.999))
GROUP_STATES = (("Stable", "numgroupsstable"), ("PreparingRebalance", "numgroupspreparingrebalance"),
                ("CompletingRebalance", "numgroupscompletingrebalance"), ("Empty", "numgroupsempty"),
                ("Dead", "numgroupsdead"))
MAX_REQUEST_LINE = 8192


def parse_metrics_listener(value: str) -> tuple[str, int] | None:
    """``http://HOST:PORT`` -> (host, port); empty -> None (no endpoint)."""
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme != "http" or parts.port is None or parts.path not in ("", "/"):
        raise ConfigError(f"Invalid metrics.listener '{value}': expected http://HOST:PORT")
    return parts.hostname or "", parts.port


class KafkaCollector(Collector):
    def __init__(self, broker: Broker, *, active_controller: bool = True) -> None:
        self.broker = broker
        self.active_controller = active_controller

    def collect(self) -> Iterator[Metric]:
        yield from self._topic_metrics()
        yield from self._request_metrics()
        yield from self._replica_metrics()
        yield from self._log_metrics()
        yield from self._controller_metrics()
        yield from self._group_metrics()
        yield from self._lag_metrics()
        yield from self._socket_metrics()
        yield from self._quota_metrics()

    # --- kafka.server:type=BrokerTopicMetrics -----------------------------------------------------
    def _topic_metrics(self) -> Iterator[Metric]:
        metrics = self.broker.metrics
        fields = (("messagesin", "messages_in", "Messages appended"), ("bytesin", "bytes_in", "Bytes produced"),
                  ("bytesout", "bytes_out", "Bytes fetched"), ("bytesrejected", "bytes_rejected", "Bytes refused"),
                  ("totalproducerequests", "total_produce", "Produce requests per topic"),
                  ("totalfetchrequests", "total_fetch", "Fetch requests per topic"),
                  ("failedproducerequests", "failed_produce", "Failed produce requests per topic"),
                  ("failedfetchrequests", "failed_fetch", "Failed fetch requests per topic"))
        for name, attr, doc in fields:
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"])
            # The broker total is the same series without the topic label, as the exporter makes it.
            family.add_metric([], getattr(metrics.totals, attr))
            for topic, counters in sorted(metrics.topics.items()):
                family.add_metric([topic], getattr(counters, attr))
            yield family

    # --- kafka.network:type=RequestMetrics ---------------------------------------------------------
    def _request_metrics(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests per API and version",
                                       labels=["request", "version"])
        errors = CounterMetricFamily("kafka_network_requestmetrics_errors", "Answers per API and error",
                                     labels=["request", "error"])
        phases = {phase: GaugeMetricFamily(f"kafka_network_requestmetrics_{phase}", f"{phase} quantiles",
                                           labels=["request", "quantile"]) for phase in PHASES}
        counts = {phase: CounterMetricFamily(f"kafka_network_requestmetrics_{phase}_count", f"{phase} observations",
                                             labels=["request"]) for phase in PHASES}
        for name, counters in sorted(self.broker.metrics.by_name().items()):
            for version, n in sorted(counters.requests.items()):
                requests.add_metric([name, str(version)], n)
            for code, n in sorted(counters.errors.items()):
                errors.add_metric([name, _error_name(code)], n)
            for phase, histogram in counters.phases.items():
                _add_quantiles(phases[phase], counts[phase], name, histogram)
        yield requests
        yield errors
        for phase in PHASES:
            yield phases[phase]
            yield _renamed(counts[phase])

    # --- kafka.server:type=ReplicaManager ----------------------------------------------------------
    def _replica_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        node = broker.node_id
        partitions = broker.partitions
        offline = under_replicated = under_min_isr = at_min_isr = leaders = 0
        for meta in broker.metadata.topics().values():
            min_isr = int(meta.configs.get("min.insync.replicas", broker.config.get_str("min.insync.replicas") or 1))
            for index, p in meta.partitions.items():
                if node not in p.replicas:
                    continue
                hosted = partitions.get((meta.name, index))
                if hosted is None or not hosted.online:
                    offline += 1
                    continue
                if p.leader == node:
                    leaders += 1
                    under_replicated += len(p.isr) < len(p.replicas)
                    under_min_isr += len(p.isr) < min_isr
                    at_min_isr += len(p.isr) == min_isr
        for name, value in (("partitioncount", len(partitions)), ("leadercount", leaders),
                            ("underreplicatedpartitions", under_replicated),
                            ("underminisrpartitioncount", under_min_isr), ("atminisrpartitioncount", at_min_isr),
                            ("offlinereplicacount", offline)):
            yield _gauge(f"kafka_server_replicamanager_{name}", name, value)
        yield _counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks", broker.metrics.isr_shrinks)
        yield _counter("kafka_server_replicamanager_isrexpands", "ISR expansions", broker.metrics.isr_expands)
        # kafka.server:type=FetcherStats,name=BytesPerSec, summed over this broker's replica fetchers
        yield _counter("kafka_server_fetcherstats_bytespersec", "record bytes fetched by replica fetchers",
                       broker.metrics.replica_fetch_bytes)
        # grete's direct path: replication push (docs/direct.md)
        m = broker.metrics
        for name, doc, value in (
                ("pushes", "pushes sent as leader", m.replica_pushes),
                ("push_bytes", "record bytes pushed as leader", m.replica_push_bytes),
                ("pushes_received", "pushes received as follower", m.replica_pushes_received),
                ("push_bytes_received", "record bytes appended from pushes", m.replica_push_bytes_received),
                ("push_fallbacks", "partitions sent back to fetching (either side)", m.replica_push_fallbacks)):
            yield _counter(f"grete_direct_replication_{name}", doc, value)
        # kafka.server:type=AddPartitionsToTxnManager (KIP-890 part 1)
        verification = GaugeMetricFamily("kafka_server_addpartitionstotxnmanager_verificationtimems",
                                         "VerificationTimeMs quantiles", labels=["quantile"])
        for label, q in QUANTILES:
            verification.add_metric([label], m.txn_verification_time.quantile(q))
        yield verification
        yield _renamed(_counter("kafka_server_addpartitionstotxnmanager_verificationtimems_count",
                                "VerificationTimeMs observations", m.txn_verification_time.count))
        yield _counter("kafka_server_addpartitionstotxnmanager_verificationfailurerate",
                       "VerificationFailureRate", m.txn_verification_failures)
        # kafka.server:type=FetchSessionCache
        sessions = broker.fetch_sessions
        yield _gauge("kafka_server_fetchsessioncache_numincrementalfetchsessions", "NumIncrementalFetchSessions",
                     len(sessions))
        yield _gauge("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
                     "NumIncrementalFetchPartitionsCached", sessions.partitions_cached())
        yield _counter("kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
                       "IncrementalFetchSessionEvictionsPerSec", sessions.evictions)

    # --- kafka.log:type=Log ----------------------------------------------------------------------
    def _log_metrics(self) -> Iterator[Metric]:
        sizes = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log", labels=["topic", "partition"])
        starts = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset", labels=["topic", "partition"])
        ends = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset", labels=["topic", "partition"])
        for (topic, index), partition in sorted(self.broker.partitions.items()):
            labels = [topic, str(index)]
            sizes.add_metric(labels, partition.size_bytes)
            starts.add_metric(labels, partition.log_start_offset)
            ends.add_metric(labels, partition.log_end_offset)
        yield sizes
        yield starts
        yield ends

    # --- kafka.controller:type=KafkaController -----------------------------------------------------
    def _controller_metrics(self) -> Iterator[Metric]:
        topics = self.broker.metadata.topics()
        offline = sum(1 for meta in topics.values() for i in meta.partitions
                      if (meta.name, i) not in self.broker.partitions)
        yield _gauge("kafka_controller_kafkacontroller_activecontrollercount", "1 on the active controller",
                     int(self.active_controller))
        yield _gauge("kafka_controller_kafkacontroller_globaltopiccount", "Topics", len(topics))
        yield _gauge("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions",
                     sum(len(m.partitions) for m in topics.values()))
        yield _gauge("kafka_controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader", offline)

    # --- kafka.coordinator.group:type=GroupMetadataManager -----------------------------------------
    def _group_metrics(self) -> Iterator[Metric]:
        groups = self._groups()
        states: dict[str, int] = {}
        offsets = 0
        for group in groups.values():
            states[group.state.value] = states.get(group.state.value, 0) + 1
            offsets += len(group.offsets)
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield _gauge(prefix + "numgroups", "Groups", len(groups))
        yield _gauge(prefix + "numoffsets", "Committed offsets", offsets)
        for state, name in GROUP_STATES:
            yield _gauge(prefix + name, f"Groups in state {state}", states.get(state, 0))

    # --- consumer lag (kminion's and Redpanda's shapes, computed here) ------------------------------
    def _lag_metrics(self) -> Iterator[Metric]:
        per_partition = GaugeMetricFamily("grete_consumer_group_topic_partition_lag",
                                          "High watermark minus committed offset",
                                          labels=["group_id", "topic_name", "partition_id"])
        per_topic = GaugeMetricFamily("grete_consumer_group_topic_lag", "Sum of the topic's partition lags",
                                      labels=["group_id", "topic_name"])
        lag_max = GaugeMetricFamily("grete_consumer_group_lag_max", "Largest partition lag", labels=["group_id"])
        lag_sum = GaugeMetricFamily("grete_consumer_group_lag_sum", "Sum of partition lags", labels=["group_id"])
        partitions = self.broker.partitions
        for group_id, group in sorted(self._groups().items()):
            by_topic: dict[str, int] = {}
            lags = []
            for (topic, index), committed in sorted(group.offsets.items()):
                partition = partitions.get((topic, index))
                if partition is None:
                    continue
                lag = max(partition.high_watermark - committed.offset, 0)
                per_partition.add_metric([group_id, topic, str(index)], lag)
                by_topic[topic] = by_topic.get(topic, 0) + lag
                lags.append(lag)
            for topic, lag in sorted(by_topic.items()):
                per_topic.add_metric([group_id, topic], lag)
            if lags:
                lag_max.add_metric([group_id], max(lags))
                lag_sum.add_metric([group_id], sum(lags))
        yield per_partition
        yield per_topic
        yield lag_max
        yield lag_sum

    # --- kafka.server:type=socket-server-metrics ----------------------------------------------------
    def _socket_metrics(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count", "Open connections",
                                   labels=["listener"])
        counts: dict[str, int] = {listener.name: 0 for listener in self.broker.listeners}
        for conn in self.broker.connections:
            name = getattr(conn, "listener", "")
            counts[name] = counts.get(name, 0) + 1
        for name, n in sorted(counts.items()):
            family.add_metric([name], n)
        yield family
        broker_rate, listeners = self.broker.connection_quotas.observed()
        yield _gauge("kafka_server_socket_server_metrics_broker_connection_accept_rate",
                     "New connections per second, all listeners but the inter-broker one", broker_rate)
        prefix = "kafka_server_socket_server_metrics_"
        accept = GaugeMetricFamily(f"{prefix}connection_accept_rate", "New connections per second",
                                   labels=["listener"])
        throttle = GaugeMetricFamily(f"{prefix}connection_accept_throttle_time", "Mean throttle time (ms) over "
                                     "the broker's or listener's connection creation rate", labels=["listener"])
        ip_throttle = GaugeMetricFamily(f"{prefix}ip_connection_accept_throttle_time", "Mean throttle time (ms) "
                                        "over IPs' connection_creation_rate quotas", labels=["listener"])
        for name, (rate, rate_ms, ip_ms) in listeners.items():
            accept.add_metric([name], rate)
            throttle.add_metric([name], rate_ms)
            ip_throttle.add_metric([name], ip_ms)
        yield accept
        yield throttle
        yield ip_throttle

    # --- kafka.server:type=Produce|Fetch|Request,user=...,client-id=... (client quotas) ------------
    def _quota_metrics(self) -> Iterator[Metric]:
        labels = ["resource", "user", "clientId"]
        byte_rate = GaugeMetricFamily("kafka_server_quota_byte_rate", "Bytes/s of a quota group", labels=labels)
        request_time = GaugeMetricFamily("kafka_server_quota_request_time",
                                         "Percent of a thread's time used by a quota group", labels=labels)
        throttle = GaugeMetricFamily("kafka_server_quota_throttle_time", "Mean throttle time (ms) given to a "
                                     "quota group over the quota window", labels=labels)
        for kind, user, client, rate, throttle_ms in self.broker.quotas.observed():
            resource = QUOTA_RESOURCES.get(kind)
            if resource is None:
                continue
            (request_time if resource == "Request" else byte_rate).add_metric([resource, user, client], rate)
            throttle.add_metric([resource, user, client], throttle_ms)
        yield byte_rate
        yield request_time
        yield throttle

    def _groups(self) -> dict[str, Any]:
        coordinator = self.broker.group_coordinator
        groups = getattr(coordinator, "groups", None)
        return dict(groups) if isinstance(groups, dict) else {}


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _add_quantiles(gauges: GaugeMetricFamily, counts: CounterMetricFamily, request: str,
                   histogram: Histogram) -> None:
    counts.add_metric([request], histogram.count)
    for label, q in QUANTILES:
        gauges.add_metric([request, label], histogram.quantile(q))


def _renamed(family: CounterMetricFamily) -> Metric:
    """The JMX exporter writes timers' counts as ``<name>_count`` counters (no ``_total``)."""
    metric = Metric(family.name, family.documentation, "untyped")
    for sample in family.samples:
        metric.add_sample(family.name, sample.labels, sample.value)
    return metric


class MetricsServer:
    """A minimal HTTP/1.1 server answering ``GET /metrics`` (anything else: 404) on the loop."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host or None, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if len(head) > MAX_REQUEST_LINE:
                    break
                match = re.match(rb"(GET|HEAD) (\S+) HTTP/1\.[01]\r\n", head)
                if match is None:
                    writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    break
                path = match.group(2).split(b"?", 1)[0]
                if path == b"/metrics":
                    body = generate_latest(self.registry)
                    status, ctype = b"200 OK", CONTENT_TYPE_LATEST.encode()
                else:
                    body, status, ctype = b"not found\n", b"404 Not Found", b"text/plain"
                payload = b"" if match.group(1) == b"HEAD" else body
                writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + payload)
                await writer.drain()
                if b"connection: close" in head.lower():
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()


def new_registry(broker: Broker) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KafkaCollector(broker))
    registry.register(ProcessCollector(registry=None))
    return registry
