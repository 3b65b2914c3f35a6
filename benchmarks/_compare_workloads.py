"""Workloads for ``benchmarks/compare.py``. Each takes a bootstrap address and returns a dict of figures.

The clients are stock: Kafka's own ``kafka-producer-perf-test`` / ``kafka-consumer-perf-test`` (Java,
same jars as the reference broker) and librdkafka (confluent-kafka). Producer runs are duration-bound:
the perf tool is given more records than it can send, its 1 s reports are read as they come, the
first ``warmup`` seconds are dropped, and the tool is stopped after ``duration`` seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from typing import Any

from tools import kafka_dist
from tools.reference_kafka import _silent_logger

MB = 1024 * 1024
# "12345 records sent, 2469.0 records/sec (2.41 MB/sec), 1.2 ms avg latency, 5.0 ms max latency."
WINDOW = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 0, "logger": _silent_logger()}
    admin = AdminClient(conf)
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)
    futures[topic].result(timeout=30)
    # Wait until the topic's leaders are visible to a fresh metadata request.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions \
                and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} not ready")


def java_tool(version: str, tool: str, *args: str) -> list[str]:
    # Full JIT (quick_start=False): the client must not be the bottleneck of a 15 s run.
    return kafka_dist.java_cmd(version, tool, *args, quick_start=False, heap="-Xmx1g")


def produce(bootstrap: str, version: str, topic: str, record_size: int, props: dict[str, str],
            duration: float, warmup: float) -> dict[str, Any]:
    """Run the producer perf tool for ``warmup + duration`` seconds; rates over the post-warm-up windows."""
    prop_args = [f"{k}={v}" for k, v in props.items()]
    cmd = java_tool(version, "kafka-producer-perf-test", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--num-records", str(10**10), "--throughput", "-1",
                    "--record-size", str(record_size), "--reporting-interval", "1000",
                    "--command-property", *prop_args)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    windows: list[tuple[float, int, float]] = []  # (arrival time, records, avg latency ms)
    other: list[str] = []
    started = time.monotonic()
    timer = threading.Timer(warmup + duration + 1.0, proc.terminate)
    timer.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        m = WINDOW.match(line)
        if m:
            windows.append((time.monotonic(), int(m.group(1)), float(m.group(4))))
        else:
            other.append(line.rstrip())
    timer.cancel()
    proc.wait()
    kept = [w for w in windows if w[0] - started > warmup + 0.5]
    if len(kept) < 2:
        raise RuntimeError("producer perf tool gave too few reports:\n" + "\n".join(other[-20:]))
    # Rate = records reported in windows 2..n over the time between the first and last report.
    records = sum(w[1] for w in kept[1:])
    span = kept[-1][0] - kept[0][0]
    rps = records / span
    return {"records_per_s": rps, "mb_per_s": rps * record_size / MB,
            "avg_latency_ms": sum(w[2] for w in kept) / len(kept), "seconds": span}


def preload(bootstrap: str, version: str, topic: str, records: int, record_size: int,
            batch_size: int = 1048576) -> dict[str, Any]:
    """Write exactly ``records`` records with the perf tool (acks=1, batches of up to ``batch_size``)."""
    cmd = java_tool(version, "kafka-producer-perf-test", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--num-records", str(records), "--throughput", "-1",
                    "--record-size", str(record_size), "--reporting-interval", "60000",
                    "--command-property", "acks=1", "enable.idempotence=false", "linger.ms=5",
                    f"batch.size={batch_size}", "buffer.memory=268435456")
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"preload failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    seconds = time.monotonic() - started
    return {"records": records, "mb": records * record_size / MB, "seconds": seconds,
            "mb_per_s": records * record_size / MB / seconds}


def consume(bootstrap: str, version: str, topic: str, records: int) -> dict[str, Any]:
    """kafka-consumer-perf-test over ``records`` preloaded records; fetch.MB.sec excludes the group join.

    The tool sets max.partition.fetch.bytes from ``--fetch-size`` (1 MB, stated here), receive.buffer.bytes
    from ``--socket-buffer-size`` (2 MB) and check.crcs=false over any ``--command-property``."""
    cmd = java_tool(version, "kafka-consumer-perf-test", "--bootstrap-server", bootstrap,
                    "--topic", topic, "--messages", str(records), "--timeout", "30000",
                    "--group", f"compare-{time.monotonic_ns()}", "--fetch-size", "1048576", "--print-metrics")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    header = next((i for i, ln in enumerate(lines) if ln.startswith("start.time")), None)
    if done.returncode != 0 or header is None or header + 1 >= len(lines):
        raise RuntimeError(f"consumer perf tool failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    names = [n.strip() for n in lines[header].split(",")]
    values = [v.strip() for v in lines[header + 1].split(",")]
    row = dict(zip(names, values, strict=False))
    return {"mb_per_s": float(row["fetch.MB.sec"]), "records_per_s": float(row["fetch.nMsg.sec"]),
            "mb": float(row["data.consumed.in.MB"]), "fetch_ms": float(row["fetch.time.ms"]),
            "rebalance_ms": float(row["rebalance.time.ms"]), **_fetch_metrics(done.stdout)}


_FETCH_METRIC = re.compile(r"consumer-fetch-manager-metrics:(fetch-latency-avg|fetch-total|fetch-size-avg):"
                           r"\{client-id=[^,}]*\}\s*:\s*([\d.]+)")


def _fetch_metrics(stdout: str) -> dict[str, float]:
    """The consumer's own view of the Fetch round trip: how much of its time was waiting on the broker."""
    found = {m.group(1): float(m.group(2)) for m in _FETCH_METRIC.finditer(stdout)}
    names = {"fetch-latency-avg": "fetch_latency_avg_ms", "fetch-total": "fetches",
             "fetch-size-avg": "fetch_size_avg_bytes"}
    return {names[k]: v for k, v in found.items()}


def empty_fetches(bootstrap: str, topic: str, consumers: int, wait_ms: int, duration: float) -> dict[str, Any]:
    """``consumers`` librdkafka consumers, each assigned the idle topic's partition 0 at its end, poll for
    ``duration`` s; Fetch requests are counted by librdkafka's own per-broker request statistics."""
    from confluent_kafka import Consumer, TopicPartition

    stats: dict[int, list[tuple[int, int]]] = {i: [] for i in range(consumers)}

    def on_stats(index: int) -> Any:
        def record(text: str) -> None:
            doc = json.loads(text)
            fetches = sum(b.get("req", {}).get("Fetch", 0) for b in doc.get("brokers", {}).values())
            stats[index].append((doc["ts"], fetches))  # ts: librdkafka's monotonic clock, µs
        return record

    clients = []
    for i in range(consumers):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"empty-{i}", "enable.auto.commit": False,
                      "fetch.wait.max.ms": wait_ms, "fetch.error.backoff.ms": 0,
                      "statistics.interval.ms": 500, "stats_cb": on_stats(i),
                      "log_level": 0, "logger": _silent_logger()})
        c.assign([TopicPartition(topic, 0, -1)])  # OFFSET_END
        clients.append(c)
    for c in clients:  # first poll: connect and resolve the offset before counting
        c.poll(0.5)
    _poll_all(clients, 1.5)
    for samples in stats.values():
        samples.clear()
    _poll_all(clients, duration)
    for c in clients:
        c.close()
    rate = 0.0
    for samples in stats.values():  # per consumer: counter delta over its own clock's span
        if len(samples) >= 2:
            (t0, n0), (t1, n1) = samples[0], samples[-1]
            rate += (n1 - n0) / ((t1 - t0) / 1e6)
    return {"fetch_per_s": rate, "consumers": consumers, "fetch_wait_max_ms": wait_ms}


def _poll_all(clients: list[Any], seconds: float) -> None:
    """Serve the clients' callbacks (statistics) for ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for c in clients:
            c.poll(0)
        time.sleep(0.01)
