"""The direct data path (shm) against grete's own TCP path, side by side on one broker.

    python benchmarks/bench_direct.py [--seconds 1.0] [--records 2000] [--kafka 4]
    python benchmarks/bench_direct.py --produce-only --rounds 5   # the produce rows only, medians

One ``grete serve`` child with ``direct.transports=shm``; clients in this process (consumers) and
in helper processes (producers). Measures:

* empty-fetch polls per second from one Python thread: ``Consumer.poll(0)`` on an idle partition
  (one slot-region read) vs Fetch v12 ``max_wait_ms=0`` round trips on one connection;
* consume latency of a preloaded record, read one at a time (the paper's Fig. 18 set-up): per
  ``poll`` with a fetch size of one batch vs one Fetch round trip per record;
* end to end, produce -> consume (a producer process stamps each record; the consumer here takes
  the difference): direct producer + direct consumer vs confluent-kafka producer + Fetch long poll;
* produce throughput with 1 KB and 64 KB batches (1 KB records): direct exclusive (C batch encoder;
  and, as before it, the Python one), direct shared (2 processes) and confluent-kafka over TCP
  (with ``--kafka 4``: also confluent-kafka against Apache Kafka 4.3.1,
  started beside grete, its JVM as kafka-server-start.sh ships it);
* broker CPU per MB produced and per MB consumed (utime + stime of the broker process, /proc), and
  the producers' own CPU per MB produced (``time.process_time``, all their threads).

Brief by design (the machine is shared): each figure is one short run, not a median of runs, but
for the produce rows with ``--rounds N`` (all rows back to back, N times; medians, the load average).
Raw JSON goes to ``benchmarks/results/direct-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer as TcpProducer  # noqa: E402

from grete.direct import Consumer, Producer, TopicPartition, encoder  # noqa: E402
from grete.protocol.messages import FetchRequest, FetchResponse  # noqa: E402
from grete.protocol.records.batch import iter_batches  # noqa: E402
from grete.protocol.records.record import decode_records  # noqa: E402
from grete.testing._wire import Wire, create_topic  # noqa: E402
from grete.testing.process import broker_process  # noqa: E402
from tools import kafka_dist  # noqa: E402
from tools.reference_kafka import ReferenceKafka  # noqa: E402

FETCH_VERSION = 12


def _fetch(topic: str, offset: int, max_bytes: int, max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=max_bytes)])])


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stats_us(ns: list[int]) -> dict[str, float]:
    us = [n / 1000 for n in ns]
    q = statistics.quantiles(us, n=10)
    return {"median_us": statistics.median(us), "p10_us": q[0], "p90_us": q[-1], "n": len(us)}


# --- empty fetches ---------------------------------------------------------------------------------
def empty_direct(servers: str, topic: str, seconds: float) -> float:
    consumer = Consumer({"bootstrap.servers": servers})
    consumer.assign([TopicPartition(topic, 0, -1)])
    poll = consumer.poll
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            poll(0)
        n += 1000
    consumer.close()
    return n / seconds


def empty_tcp(host: str, port: int, topic: str, seconds: float) -> float:
    wire = Wire(host, port)
    request = _fetch(topic, 0, 1 << 20)
    n = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        wire.call(request, FetchResponse, FETCH_VERSION)
        n += 1
    wire.close()
    return n / seconds


# --- preloaded records, one at a time --------------------------------------------------------------
def preload(servers: str, topic: str, count: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": servers, "batch.size": 1, "direct.producer.mode": "exclusive"})
    for i in range(count):
        producer.produce(topic, b"%08d" % i + b"x" * (size - 8), partition=0)
        if i % 100 == 0:
            producer.poll(0)
    producer.flush(30)
    producer.close()


def one_at_a_time_direct(servers: str, topic: str, count: int, size: int) -> dict[str, float]:
    consumer = Consumer({"bootstrap.servers": servers, "direct.fetch.bytes": size + 80})
    consumer.assign([TopicPartition(topic, 0, 0)])
    times = []
    got = 0
    while got < count:
        t0 = time.perf_counter_ns()
        message = consumer.poll(0)
        t1 = time.perf_counter_ns()
        if message is not None:
            times.append(t1 - t0)
            got += 1
    consumer.close()
    return _stats_us(times)


def one_at_a_time_tcp(host: str, port: int, topic: str, count: int, size: int) -> dict[str, float]:
    wire = Wire(host, port)
    times = []
    offset = 0
    while offset < count:
        t0 = time.perf_counter_ns()
        response = wire.call(_fetch(topic, offset, size + 80), FetchResponse, FETCH_VERSION)
        records = response.responses[0].partitions[0].records
        batches = list(iter_batches(records)) if records else []
        for batch in batches:
            decode_records(batch)
        t1 = time.perf_counter_ns()
        if batches:
            times.append(t1 - t0)
            offset = batches[-1].next_offset
    wire.close()
    return _stats_us(times)


# --- end to end --------------------------------------------------------------------------------------
def _stamping_producer(servers: str, topic: str, count: int, direct: bool, start: Any) -> None:
    if direct:
        producer: Any = Producer({"bootstrap.servers": servers, "batch.size": 1})
    else:
        producer = TcpProducer({"bootstrap.servers": servers, "linger.ms": 0, "acks": 1})
    start.wait()
    for _ in range(count):
        producer.produce(topic, str(time.perf_counter_ns()).encode(), partition=0)
        producer.flush(10)
        time.sleep(0.0005)  # one record in flight at a time, with the consumer idle between them
    if direct:
        producer.close()


def end_to_end(servers: str, topic: str, count: int, direct: bool) -> dict[str, float]:
    host, port = servers.rsplit(":", 1)
    start = multiprocessing.Event()
    writer = multiprocessing.Process(target=_stamping_producer, args=(servers, topic, count, direct, start))
    writer.start()
    times: list[int] = []
    if direct:
        consumer = Consumer({"bootstrap.servers": servers, "direct.poll.spin.us": 1_000_000})
        consumer.assign([TopicPartition(topic, 0, -1)])
        start.set()
        while len(times) < count:
            message = consumer.poll(5)
            if message is None:
                break
            now = time.perf_counter_ns()
            times.append(now - int(message.value() or b"0"))
        consumer.close()
    else:
        wire = Wire(host, int(port))
        offset = 0
        start.set()
        while len(times) < count:
            response = wire.call(_fetch(topic, offset, 1 << 20, max_wait_ms=500), FetchResponse, FETCH_VERSION)
            now = time.perf_counter_ns()
            records = response.responses[0].partitions[0].records
            for batch in iter_batches(records or b""):
                for record in decode_records(batch):
                    times.append(now - int(record.value or b"0"))
                offset = batch.next_offset
        wire.close()
    writer.join(30)
    return _stats_us(times)


# --- produce throughput ---------------------------------------------------------------------------
def _throughput_worker(servers: str, topic: str, batch_bytes: int, seconds: float, mode: str, encoding: str,
                       out: Any) -> None:
    if encoding:
        os.environ[encoder.ENV] = encoding  # this producer process only
    record = b"r" * 1000
    per_batch = max(1, batch_bytes // 1024)
    if mode == "tcp":
        producer: Any = TcpProducer({"bootstrap.servers": servers, "linger.ms": 2, "acks": 1,
                                     "batch.size": batch_bytes, "queue.buffering.max.kbytes": 65536})
    else:
        producer = Producer({"bootstrap.servers": servers, "batch.size": per_batch * 1000,
                             "direct.producer.mode": mode})
    sent = 0
    end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    cpu0 = time.process_time()  # every thread of this process: librdkafka's too
    while time.perf_counter() < end:
        for _ in range(per_batch):
            try:
                producer.produce(topic, record, partition=0)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if mode != "tcp":
        producer.close()
    out.put((sent * len(record) / elapsed / 1e6, sent * len(record), cpu))


def throughput(servers: str, topic: str, batch_bytes: int, seconds: float, mode: str, procs: int = 1,
               broker_pid: int | None = None, encoding: str = "") -> tuple[float, float, float]:
    """(MB/s over all producers, broker CPU ms per MB produced, producers' CPU ms per MB)."""
    before = _cpu_s(broker_pid) if broker_pid else 0.0
    queue: Any = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=_throughput_worker,
                                       args=(servers, topic, batch_bytes, seconds, mode, encoding, queue))
               for _ in range(procs)]
    for w in workers:
        w.start()
    reports = [queue.get(timeout=120) for _ in workers]
    for w in workers:
        w.join(30)
    cpu_ms = (_cpu_s(broker_pid) - before) * 1000 if broker_pid else 0.0
    total_mb = sum(sent for _, sent, _ in reports) / 1e6
    client_ms = sum(cpu for *_, cpu in reports) * 1000
    if not total_mb:
        return 0.0, 0.0, 0.0
    return float(sum(rate for rate, *_ in reports)), cpu_ms / total_mb, client_ms / total_mb


# --- broker CPU per MB consumed ----------------------------------------------------------------------
def cpu_per_mb(servers: str, pid: int, topic: str, total_bytes: int, direct: bool) -> float:
    host, port = servers.rsplit(":", 1)
    before = _cpu_s(pid)
    read = 0
    if direct:
        consumer = Consumer({"bootstrap.servers": servers})
        consumer.assign([TopicPartition(topic, 0, 0)])
        while read < total_bytes:
            message = consumer.poll(1)
            if message is None:
                break
            read += len(message)
        consumer.close()
    else:
        wire = Wire(host, int(port))
        offset = 0
        while read < total_bytes:
            response = wire.call(_fetch(topic, offset, 1 << 20), FetchResponse, FETCH_VERSION)
            records = response.responses[0].partitions[0].records
            if not records:
                break
            for batch in iter_batches(records):
                for record in decode_records(batch):
                    read += len(record.value or b"")
                offset = batch.next_offset
        wire.close()
    return (_cpu_s(pid) - before) * 1000 / (read / 1e6)


# Producers compared, each row one (mode, processes, encoder): "python" is the direct producer with its
# Python batch encoder (GRETE_DIRECT_ENCODER=python), the encoder it had before the C one.
PRODUCE_ROWS = (("tcp_confluent", "tcp", 1, ""), ("direct_exclusive", "exclusive", 1, ""),
                ("direct_exclusive_python_encoder", "exclusive", 1, "python"),
                ("direct_shared_2proc", "shared", 2, ""))


def produce_rounds(servers: str, pid: int, seconds: float, rounds: int,
                   kafka: ReferenceKafka | None) -> dict[str, dict[str, Any]]:
    """Every producer row back to back, ``rounds`` times over; each figure's median (and all rounds)."""
    runs: dict[str, dict[str, list[float]]] = {}
    for r in range(rounds):
        for batch in (1024, 65536):
            row = runs.setdefault(f"{batch // 1024}KB", {})
            for name, mode, procs, encoding in PRODUCE_ROWS:
                mbps, cpu, client = throughput(servers, "tput", batch, seconds, mode, procs, pid, encoding)
                row.setdefault(f"{name}_MBps", []).append(mbps)
                row.setdefault(f"{name}_broker_cpu_ms_per_MB", []).append(cpu)
                row.setdefault(f"{name}_client_cpu_ms_per_MB", []).append(client)
            if kafka is not None and kafka.proc is not None:
                mbps, cpu, _ = throughput(kafka.bootstrap, "tput", batch, seconds, "tcp", 1, kafka.proc.pid)
                row.setdefault(f"tcp_kafka_{kafka.version}_MBps", []).append(mbps)
                row.setdefault(f"tcp_kafka_{kafka.version}_broker_cpu_ms_per_MB", []).append(cpu)
            print(f"throughput round {r + 1}", batch, {k: round(v[-1], 1) for k, v in row.items()}, flush=True)
    tput: dict[str, dict[str, Any]] = {}
    for size, row in runs.items():
        tput[size] = {key: statistics.median(values) for key, values in row.items()}
        if rounds > 1:
            tput[size]["rounds"] = row
    return tput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1, help="produce throughput rounds (medians reported)")
    parser.add_argument("--produce-only", action="store_true", help="only the produce throughput rows")
    parser.add_argument("--kafka", default="",
                        help="also produce to this Apache Kafka version (e.g. 4) with confluent-kafka, the same "
                             "settings, alternated with grete's rows in the same run")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        kafka = None
        if args.kafka:
            kafka = stack.enter_context(ReferenceKafka(args.kafka, log_level="WARN", jvm=kafka_dist.KAFKA_SERVER_JVM))
            host, port = kafka.bootstrap.rsplit(":", 1)
            create_topic(host, int(port), "tput", 1, {})
        run(args, kafka)


def run(args: argparse.Namespace, kafka: ReferenceKafka | None) -> None:
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "loadavg_start": os.getloadavg(), "encoder": encoder.select().name}
    overrides = {"direct.transports": "shm"}
    topics = {"idle": 1, "preload": 1, "e2e-direct": 1, "e2e-tcp": 1, "tput": 1}
    with broker_process(overrides, topics=topics) as broker:
        servers, pid = broker.bootstrap_servers, broker.process.pid
        host, port = servers.rsplit(":", 1)
        if args.produce_only:
            results["produce_throughput"] = produce_rounds(servers, pid, args.seconds, args.rounds, kafka)
            results["loadavg_end"] = os.getloadavg()
            _write(results)
            return
        results["empty_polls_per_s"] = {"direct": empty_direct(servers, "idle", args.seconds),
                                        "tcp": empty_tcp(host, int(port), "idle", args.seconds)}
        print("empty polls/s", results["empty_polls_per_s"], flush=True)
        preload(servers, "preload", args.records, 100)
        results["one_record_at_a_time_100B"] = {
            "direct": one_at_a_time_direct(servers, "preload", args.records, 100),
            "tcp": one_at_a_time_tcp(host, int(port), "preload", args.records, 100)}
        print("one at a time", results["one_record_at_a_time_100B"], flush=True)
        n = min(args.records, 500)
        results["end_to_end"] = {"direct": end_to_end(servers, "e2e-direct", n, True),
                                 "tcp": end_to_end(servers, "e2e-tcp", n, False)}
        print("end to end", results["end_to_end"], flush=True)
        results["produce_throughput"] = produce_rounds(servers, pid, args.seconds, 1, kafka)
        volume = 50_000_000
        results["broker_cpu_ms_per_MB_consumed"] = {
            "direct": cpu_per_mb(servers, pid, "tput", volume, True),
            "tcp": cpu_per_mb(servers, pid, "tput", volume, False)}
        print("broker cpu ms/MB", results["broker_cpu_ms_per_MB_consumed"], flush=True)
    results["loadavg_end"] = os.getloadavg()
    _write(results)


def _write(results: dict[str, Any]) -> None:
    out = REPO / "benchmarks" / "results" / f"direct-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
