"""Latency workloads for ``benchmarks/compare.py`` (each returns a dict of figures, like the others):

* ``end_to_end``: librdkafka producer at a fixed rate, librdkafka consumer in the same process; each
  record carries its send time (``time.perf_counter_ns``, one clock for both sides), the consumer
  records receive time minus send time; p50/p99/p99.9 over the post-warm-up records.
* ``group_start``: three librdkafka consumers join one new group (classic protocol) on a 3-partition
  topic that already holds records; figures are from creating the consumers to the first record of
  any member and to every member having had one.
* ``fetch_latency``: raw Fetch v12 round trips for offset 0 of one partition on five fresh
  connections in turn: the first round trip, then median and p99 over the repeats on all five; the
  response's bytes are read, not decoded. Used once the log holds 1 GB and again at the large size.
"""

from __future__ import annotations

import socket
import statistics
import struct
import threading
import time
from typing import Any

from grete.protocol.codec import Writer
from grete.protocol.headers import RequestHeader, encode_request_header
from grete.protocol.messages import FetchRequest, request_header_version
from grete.testing._wire import _exact
from tools.reference_kafka import _silent_logger

FETCH_VERSION = 12  # both Kafka 3.9 and 4.x serve it; grete's highest


def _quiet(conf: dict[str, Any]) -> dict[str, Any]:
    return {**conf, "log_level": 0, "logger": _silent_logger()}


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(int(q / 100 * len(sorted_values) + 0.999999) - 1, 0)
    return sorted_values[min(rank, len(sorted_values) - 1)]


# --- 5: end-to-end latency at a fixed rate --------------------------------------------------------
def end_to_end(bootstrap: str, topic: str, mb_per_s: float, duration: float, warmup: float,
               record_size: int = 1024) -> dict[str, Any]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(_quiet({"bootstrap.servers": bootstrap, "group.id": f"e2e-{time.monotonic_ns()}",
                                "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                                "fetch.min.bytes": 1}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.poll(0.5)  # connect and start fetching before the first record is sent
    producer = Producer(_quiet({"bootstrap.servers": bootstrap, "acks": "1", "enable.idempotence": False,
                                "linger.ms": 0}))
    latencies: list[int] = []
    measure_from = time.perf_counter_ns() + int(warmup * 1e9)
    stop = threading.Event()

    def consume() -> None:
        # One message per poll: consume(n, timeout) would hold records back until n arrive or the
        # timeout passes, which would be measured as latency.
        while not stop.is_set():
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            now = time.perf_counter_ns()
            value = msg.value()
            if msg.error() is None and value:
                sent = int.from_bytes(value[:8], "big")
                if sent >= measure_from:
                    latencies.append(now - sent)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    per_second = mb_per_s * 1024 * 1024 / record_size
    padding = b"\0" * (record_size - 8)
    started = time.perf_counter()
    sent = 0
    end = started + warmup + duration
    while (now := time.perf_counter()) < end:
        due = int((now - started) * per_second)
        while sent < due:
            producer.produce(topic, time.perf_counter_ns().to_bytes(8, "big") + padding, partition=0)
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    producer.flush(10)
    time.sleep(0.5)  # let the last records arrive
    stop.set()
    reader.join(10)
    consumer.close()
    if len(latencies) < 100:
        raise RuntimeError(f"only {len(latencies)} records came back")
    ms = sorted(v / 1e6 for v in latencies)
    return {"p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "p999_ms": percentile(ms, 99.9),
            "max_ms": ms[-1], "records": len(ms), "offered_rate_per_s": per_second}


# --- 8: 3-member consumer group -------------------------------------------------------------------
def group_start(bootstrap: str, topic: str, runs: int) -> dict[str, Any]:
    """``topic`` has 3 partitions and records in each (the caller produced them). One extra group
    goes first and is reported apart (``cold_*``): if it is the broker's first group ever, it pays
    for creating ``__consumer_offsets``; the medians are over the ``runs`` groups after it."""
    firsts, alls = [], []
    for run in range(runs + 1):
        first, last = _group_once(bootstrap, topic, f"g3-{time.monotonic_ns()}-{run}")
        firsts.append(first)
        alls.append(last)
    return {"first_record_s": statistics.median(firsts[1:]), "all_members_s": statistics.median(alls[1:]),
            "cold_first_record_s": firsts[0], "cold_all_members_s": alls[0], "runs": runs}


def _group_once(bootstrap: str, topic: str, group: str, timeout: float = 60.0) -> tuple[float, float]:
    from confluent_kafka import Consumer

    got: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    t0 = time.perf_counter()

    def member() -> None:
        consumer = Consumer(_quiet({"bootstrap.servers": bootstrap, "group.id": group,
                                    "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                    "heartbeat.interval.ms": 100}))
        consumer.subscribe([topic])
        mine = False
        while not stop.is_set():
            msg = consumer.poll(0.01)
            if msg is not None and msg.error() is None and not mine:
                mine = True
                with lock:
                    got.append(time.perf_counter())
        consumer.close()

    threads = [threading.Thread(target=member, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.002)
    stop.set()
    for t in threads:
        t.join(30)
    if len(got) < 3:
        raise RuntimeError(f"only {len(got)} of 3 members got a record in {timeout} s")
    return min(got) - t0, max(got) - t0


# --- 9: fetch latency from the start of a large log -----------------------------------------------
def fetch_latency(bootstrap: str, topic: str, repeats: int, max_bytes: int = 1024 * 1024,
                  connections: int = 5) -> dict[str, Any]:
    """``repeats`` Fetches of offset 0 on each of ``connections`` fresh connections, one at a time.

    Several connections because one is a coin toss on this VM: under BBR a 1 MB answer over
    loopback took 0.33 ms on most connections and 0.71 ms on others, for the whole connection
    (docs/benchmarks.md, workload 9)."""
    host, port = bootstrap.rsplit(":", 1)
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=0,
                           topics=[FetchRequest.FetchTopic(topic=topic, partitions=[
                               FetchRequest.FetchPartition(partition=0, fetch_offset=0,
                                                           partition_max_bytes=max_bytes)])])
    first, warm, per_connection, size = 0.0, [], [], 0
    for _ in range(connections):
        with socket.create_connection((host, int(port)), timeout=60) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            times = []
            for i in range(repeats + 1):
                frame = _frame(request, i + 1)
                t0 = time.perf_counter()
                sock.sendall(frame)
                size = _read_frame(sock)
                times.append(time.perf_counter() - t0)
        first = first or times[0]
        warm += times[1:]
        per_connection.append(statistics.median(times[1:]) * 1e3)
    if size < 1000:
        raise RuntimeError(f"Fetch at offset 0 returned only {size} bytes: no records?")
    warm.sort()
    return {"first_ms": first * 1e3, "median_ms": statistics.median(warm) * 1e3,
            "p99_ms": percentile(warm, 99) * 1e3, "response_bytes": size, "repeats": repeats,
            "connections": connections, "connection_medians_ms": per_connection}


def _frame(request: FetchRequest, correlation_id: int) -> bytes:
    w = Writer()
    size = w.reserve_int32()
    encode_request_header(w, RequestHeader(api_key=1, api_version=FETCH_VERSION, correlation_id=correlation_id,
                                           client_id="compare"), request_header_version(1, FETCH_VERSION))
    request.encode(w, FETCH_VERSION)
    w.patch_int32(size, w.nbytes - 4)
    return w.getvalue()


def _read_frame(sock: socket.socket) -> int:
    """Read one whole response frame; its size."""
    header = _exact(sock, 4)
    size = struct.unpack(">i", header)[0]
    view = memoryview(bytearray(size))
    got = 0
    while got < size:
        n = sock.recv_into(view[got:])
        if not n:
            raise ConnectionError("broker closed the connection")
        got += n
    return size

