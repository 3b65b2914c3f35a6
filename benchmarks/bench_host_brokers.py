"""A host's cores: aggregate produce throughput of one broker against two brokers on this machine,
both started by ``grete host`` (docs/cluster.md, "Several brokers per host"), with a C client.

Each round starts one grete KRaft controller and ``grete host --brokers N`` (N = 1, then 2, the
order alternating by round), creates a topic of ``--partitions`` partitions with replication factor 1
(spread over the brokers), and runs ``--producers`` producer processes at once, each producing
``--mb`` MB of ``--size``-byte records, acks=1, linger.ms=5, to random partitions. The producer is
``benchmarks/c/produce_perf.c``, librdkafka in C sending one static buffer (what librdkafka's own
performance tool does): on two cores the client's CPU is taken from the brokers', and kcat, which
reads and copies every record from its input, cost 1.1-1.6 ms/MB, as much as a broker. It is built
with gcc against Debian's librdkafka-dev (``apt-get install librdkafka-dev``) into the cache on first
use. The figure is the total bytes over the wall time of the slowest producer (each exits once every
record is acknowledged). Also reported: the brokers' and the clients' CPU per MB (utime + stime),
from which the arithmetic for larger hosts in docs/benchmarks.md is made.

    python -m benchmarks.bench_host_brokers [--rounds 3] [--mb 500] [--producers 2] [--partitions 8]

Writes benchmarks/results/host-brokers-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from benchmarks.bench_scaling import create_topic
from grete.testing.common import free_ports
from grete.testing.kraft import ControllerQuorum

RESULTS = Path(__file__).parent / "results"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def host_brokers(count: int, scratch: Path) -> Iterator[tuple[str, list[int]]]:
    """A one-controller KRaft cluster and ``grete host --brokers count``: (bootstrap, broker pids)."""
    (scratch / "controller").mkdir()
    quorum = ControllerQuorum(scratch / "controller", count=1)
    quorum.start()
    port = free_ports(count)
    properties = {**quorum.broker_items(1), "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                  "log.dirs": str(scratch / "data"), "offsets.topic.replication.factor": "1",
                  "offsets.topic.num.partitions": "3"}
    path = scratch / "host.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    host = subprocess.Popen([sys.executable, "-m", "grete.cli", "host", str(path), "--brokers", str(count),
                             "--dir", str(scratch / "host"), "--cluster-id", quorum.cluster_id],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        pids = []
        assert host.stdout is not None
        for line in host.stdout:
            if line.startswith("broker ") and "(pid " in line:
                pids.append(int(line.split("(pid ")[1].split(")")[0]))
            if "Ctrl-C stops every broker" in line:
                break
        bootstrap = ",".join(f"127.0.0.1:{port + i}" for i in range(count))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=5).brokers) < count:
            if time.monotonic() > deadline:
                raise RuntimeError("the brokers did not register")
            time.sleep(0.2)
        yield bootstrap, pids
    finally:
        host.send_signal(signal.SIGTERM)
        host.wait(120)
        quorum.stop()


def producer_tool() -> Path:
    """``benchmarks/c/produce_perf.c`` compiled into the cache (again when the source changes)."""
    source = Path(__file__).parent / "c" / "produce_perf.c"
    cache = Path(os.environ.get("GRETE_CACHE") or Path.home() / ".cache" / "grete") / "bench"
    binary = cache / f"produce_perf-{int(source.stat().st_mtime)}"
    if not binary.exists():
        if not Path("/usr/include/librdkafka/rdkafka.h").exists():
            raise SystemExit("benchmarks/c/produce_perf.c needs librdkafka's headers: apt-get install librdkafka-dev")
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-O2", "-Wall", "-o", str(binary), str(source), "-lrdkafka"], check=True)
    return binary


def produce(tool: Path, bootstrap: str, topic: str, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    count = args.mb * 1_000_000 // args.size
    return subprocess.Popen([str(tool), bootstrap, topic, str(count), str(args.size), "acks=1", "linger.ms=5",
                             "queue.buffering.max.messages=1000000"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def one_round(brokers: int, n: int, args: argparse.Namespace, tool: Path) -> dict[str, Any]:
    scratch = Path(tempfile.mkdtemp(prefix="bench-host-", dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    try:
        with host_brokers(brokers, scratch) as (bootstrap, pids):
            topic = f"host-{brokers}-{n}"
            create_topic(bootstrap, topic, args.partitions)
            broker_cpu = sum(cpu_seconds(pid) for pid in pids)
            started = time.perf_counter()
            producers = [produce(tool, bootstrap, topic, args) for _ in range(args.producers)]
            client_cpu = 0.0
            for producer in producers:
                _, status, usage = os.wait4(producer.pid, 0)
                producer.returncode = os.waitstatus_to_exitcode(status)
                client_cpu += usage.ru_utime + usage.ru_stime
                if producer.returncode != 0:
                    raise RuntimeError(f"produce_perf failed: {producer.stderr.read().decode() if producer.stderr else ''}")
            elapsed = time.perf_counter() - started
            broker_cpu = sum(cpu_seconds(pid) for pid in pids) - broker_cpu
            del producers  # (their metadata clients would log the brokers' shutdown)
        total_mb = args.mb * args.producers
        return {"brokers": brokers, "round": n, "mb_s": total_mb / elapsed,
                "broker_cpu_ms_per_mb": broker_cpu * 1000 / total_mb,
                "client_cpu_ms_per_mb": client_cpu * 1000 / total_mb}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=int, default=500, help="MB per producer")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--size", type=int, default=1024)
    args = parser.parse_args()
    tool = producer_tool()
    results = []
    for n in range(args.rounds):
        for brokers in ((1, 2) if n % 2 == 0 else (2, 1)):  # alternated: drifts hit both alike
            result = one_round(brokers, n, args, tool)
            print(json.dumps(result), flush=True)
            results.append(result)
    summary: dict[str, Any] = {}
    for brokers in (1, 2):
        mine = [r for r in results if r["brokers"] == brokers]
        summary[str(brokers)] = {key: statistics.median(r[key] for r in mine)
                                 for key in ("mb_s", "broker_cpu_ms_per_mb", "client_cpu_ms_per_mb")}
    summary["two_over_one"] = summary["2"]["mb_s"] / summary["1"]["mb_s"]
    print(json.dumps({"medians": summary}, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"host-brokers-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps({"args": vars(args), "rounds": results, "medians": summary}, indent=1))


if __name__ == "__main__":
    main()
