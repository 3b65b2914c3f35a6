"""What TLS costs: produce and consume throughput over SASL_PLAINTEXT and over SASL_SSL (the same
PLAIN login, so TLS is the only difference), on grete and on Apache Kafka 4.3.1, side by side in one
run (docs/benchmarks.md, "TLS").

grete answers Fetch with ``sendfile`` on a plaintext socket (zero-copy); under TLS its own record
layer (grete/broker/network/tls_offload.py) reads the slices and encrypts them on worker threads. Kafka copies
under TLS too. The ratio TLS / plaintext is the figure to compare; on a shared machine the broker's
CPU time per MB (utime + stime from /proc, grete only) moves far less than throughput does.

    python -m benchmarks.bench_tls [--mb 100] [--rounds 2] [--targets grete,kafka-4]
    python -m benchmarks.bench_tls --targets grete,grete-python-reader   # the C record reader against Python's ssl

Target ``grete-python-reader`` is grete reading TLS records through ``SSLObject.read``, one per call
(``GRETE_TLS_READER=python``), where ``grete`` reads them with its C record reader.

A test CA and server certificate are made for the run (``tests/broker/_tls.py``). Writes
benchmarks/results/tls-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.bench_host_brokers import producer_tool
from benchmarks.bench_request_cpu import cpu_seconds
from grete.broker.network import tls_records
from grete.testing.process import broker_process
from tests.broker._tls import Certs, make_certs
from tools.kafka_admin import create_topic
from tools.reference_kafka import ReferenceKafka, Security, free_port

USERS = {"bench": "bench-secret"}
RESULTS = Path(__file__).parent / "results"
VALUE = 1024


@contextmanager
def started(target: str, certs: Certs) -> Iterator[tuple[str, str, str, int | None]]:
    """(PLAINTEXT bootstrap for admin, SASL_PLAINTEXT bootstrap, SASL_SSL bootstrap, the broker's
    pid when it is grete)."""
    security = Security(plain_users=USERS, authorizer=False, ssl_keystore=certs.server)
    if not target.startswith("grete"):
        with ReferenceKafka(target.removeprefix("kafka-"), security=security, log_level="WARN") as ref:
            yield ref.bootstrap, ref.sasl_bootstrap, ref.sasl_ssl_bootstrap, None
        return
    sasl, sasl_ssl = free_port(), free_port()
    listeners = f"PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:{sasl},SASL_SSL://127.0.0.1:{sasl_ssl}"
    overrides = {"listeners": listeners, "sasl.enabled.mechanisms": "PLAIN",
                 "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
                 "listener.name.sasl_ssl.ssl.keystore.location": str(certs.server)}
    for name in ("sasl_plaintext", "sasl_ssl"):
        overrides[f"listener.name.{name}.plain.sasl.jaas.config"] = security.jaas_plain()
    with reader_env("python" if target == "grete-python-reader" else ""), broker_process(overrides) as running:
        yield running.bootstrap_servers, f"127.0.0.1:{sasl}", f"127.0.0.1:{sasl_ssl}", running.pid


@contextmanager
def reader_env(value: str) -> Iterator[None]:
    """The broker process started inside sees GRETE_TLS_READER=``value`` (unset when empty)."""
    before = os.environ.pop(tls_records.ENV, None)
    if value:
        os.environ[tls_records.ENV] = value
    try:
        yield
    finally:
        os.environ.pop(tls_records.ENV, None)
        if before is not None:
            os.environ[tls_records.ENV] = before


def loop_seconds(pid: int) -> float:
    """CPU time of the broker's main thread, which runs its event loop: what bounds one broker's
    throughput on a host with cores to spare (crypto threads add to the process, not to this)."""
    fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def user_seconds(pid: int) -> float:
    """The broker's CPU time in user space: its crypto and Python, without the kernel's page-cache
    writes, whose cost on this VM swings with how recently memory was freed."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / os.sysconf("SC_CLK_TCK")


def client(bootstrap: str, tls: bool, certs: Certs, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "sasl.mechanism": "PLAIN", "sasl.username": "bench",
                            "sasl.password": USERS["bench"],
                            "security.protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT", **extra}
    if tls:
        conf["ssl.ca.location"] = str(certs.ca)
    return conf


def produce(conf: dict[str, Any], topic: str, count: int, tool: Path | None = None) -> float:
    """MB/s acknowledged: from this process's confluent-kafka loop, or with ``tool`` (the C producer
    of benchmarks/c/produce_perf.c, which costs the client far less CPU) in a child process."""
    settings = {**conf, "linger.ms": 5, "acks": "1", "queue.buffering.max.messages": 1_000_000}
    if tool is not None:
        started_at = time.perf_counter()
        subprocess.run([str(tool), settings.pop("bootstrap.servers"), topic, str(count), str(VALUE),
                        *(f"{k}={v}" for k, v in settings.items())], check=True, stdout=subprocess.DEVNULL)
        return count * VALUE / (time.perf_counter() - started_at) / 1e6
    producer = Producer(settings)
    value = b"x" * VALUE
    started_at = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return count * VALUE / (time.perf_counter() - started_at) / 1e6


def consume(conf: dict[str, Any], topic: str, count: int) -> float:
    consumer = Consumer({**conf, "group.id": f"bench-{time.monotonic_ns()}", "enable.auto.commit": False,
                         "fetch.max.bytes": 52_428_800})
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    started_at = 0.0  # from the first record: connecting and the first metadata are not the fetch path
    while read < count:
        for message in consumer.consume(min(10_000, count - read), 1):
            assert message.error() is None, message.error()
            if not read:
                started_at = time.perf_counter()
            read += 1
    elapsed = time.perf_counter() - started_at
    consumer.close()
    return (count - 1) * VALUE / elapsed / 1e6


def one_round(target: str, n: int, mb: int, certs: Certs, tool: Path | None) -> Iterator[dict[str, Any]]:
    """Plaintext and TLS, each on a broker of its own, in an order that alternates by round. On this
    VM a write into a page-cache page the host has taken back costs ~2 ms/MB of kernel time, one
    into a page freed a moment ago ~0.2 (docs/benchmarks.md, "Produce on this VM"): each broker
    starts right after the previous one's data is deleted, so both paths write into pages freed
    alike (sharing a broker, the second path wrote into fresh pages and looked far dearer)."""
    count = mb * 1_000_000 // VALUE
    for tls in ((False, True) if n % 2 == 0 else (True, False)):
        with started(target, certs) as (plain, sasl, sasl_ssl, pid):
            def cpu_ms() -> tuple[float, float, float]:
                if pid is None:
                    return 0.0, 0.0, 0.0
                return cpu_seconds(pid) * 1000, user_seconds(pid) * 1000, loop_seconds(pid) * 1000
            topic = f"tls-{int(tls)}-{n}"
            create_topic(plain, topic)
            bootstrap = sasl_ssl if tls else sasl
            before = cpu_ms()
            produced = produce(client(bootstrap, tls, certs), topic, count, tool)
            middle = cpu_ms()
            consumed = consume(client(bootstrap, tls, certs), topic, count)
            after = cpu_ms()
            result = {"target": target, "round": n, "tls": tls, "produce_mb_s": produced, "consume_mb_s": consumed}
            if pid is not None:
                result |= {"produce_cpu_ms_per_mb": (middle[0] - before[0]) / mb,
                           "consume_cpu_ms_per_mb": (after[0] - middle[0]) / mb,
                           "produce_user_ms_per_mb": (middle[1] - before[1]) / mb,
                           "consume_user_ms_per_mb": (after[1] - middle[1]) / mb,
                           "produce_loop_ms_per_mb": (middle[2] - before[2]) / mb,
                           "consume_loop_ms_per_mb": (after[2] - middle[2]) / mb}
            yield result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--targets", default="grete,kafka-4")
    parser.add_argument("--producer", choices=("python", "c"), default="python",
                        help="c: benchmarks/c/produce_perf.c, so the client's cost moves the ratio less")
    args = parser.parse_args()
    tool = producer_tool() if args.producer == "c" else None
    certs = make_certs(Path(tempfile.mkdtemp(prefix="bench-tls-")))
    results = []
    for n in range(args.rounds):
        for target in args.targets.split(","):  # alternated, so drifts of the machine hit both alike
            for result in one_round(target, n, args.mb, certs, tool):
                print(json.dumps(result), flush=True)
                results.append(result)
    summary: dict[str, dict[str, float]] = {}
    for target in args.targets.split(","):
        row: dict[str, float] = {}
        for tls in (False, True):
            mine = [r for r in results if r["target"] == target and r["tls"] == tls]
            for key in ("produce_mb_s", "consume_mb_s", "produce_cpu_ms_per_mb", "consume_cpu_ms_per_mb",
                        "produce_user_ms_per_mb", "consume_user_ms_per_mb", "produce_loop_ms_per_mb",
                        "consume_loop_ms_per_mb"):
                if key in mine[0]:
                    row[f"{'tls' if tls else 'plain'}_{key}"] = statistics.median(r[key] for r in mine)
        for way in ("consume", "produce"):
            row[f"{way}_tls_over_plain"] = row[f"tls_{way}_mb_s"] / row[f"plain_{way}_mb_s"]
            if f"tls_{way}_cpu_ms_per_mb" in row:  # CPU per MB, plaintext's over TLS's: 1.0 = TLS costs nothing
                row[f"{way}_cpu_plain_over_tls"] = row[f"plain_{way}_cpu_ms_per_mb"] / row[f"tls_{way}_cpu_ms_per_mb"]
        summary[target] = row
    print(json.dumps({"medians": summary}, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"tls-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps({"args": vars(args), "rounds": results, "medians": summary}, indent=1))


if __name__ == "__main__":
    main()
