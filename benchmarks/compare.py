"""grete side by side with Apache Kafka: same machine, same data disk, same clients, one broker at a time.

    python -m benchmarks.compare                          # full run: grete and Kafka 4.3.1 (~13 min)
    python -m benchmarks.compare --kafka 4.3.1,3.9.2      # plus a Kafka 3.9.2 column (~20 min)
    python -m benchmarks.compare --quick --no-docs        # smoke test: every workload briefly
    python -m benchmarks.compare --repeat 3               # each figure as median [min..max] of 3 runs
    python -m benchmarks.compare --kafka 4.3.1 --workloads empty_fetch --baseline /tmp/grete-old

For each broker in turn (grete, then each Kafka version; the whole sequence ``--repeat`` times, so
brokers alternate), start it in a fresh temp dir and run the workloads (``--workloads`` picks some):
  produce_acks1_p1/_p8     1. produce 1 KB records, acks=1, linger.ms=5, batch.size=1 MB, 1 and 8 partitions
  produce_acksall_p1/_p8   2. the same with acks=all and idempotence (the Java defaults)
  consume_p1               3. consume a preloaded 1-partition topic (kafka-consumer-perf-test)
  small_p1                 4. 100 B records, linger.ms=0, 100 requests in flight
  e2e_latency              5. end-to-end latency p50/p99/p99.9 at a fixed rate (librdkafka, 10 MB/s)
  empty_fetch              6. empty Fetch requests/s: 16 librdkafka consumers polling an idle partition
  (always)                 7. start to first acknowledged produce; idle RSS; peak RSS over the workloads
  group3                   8. 3-member consumer group: consumers created to first record consumed
  fetch_latency            9. Fetch at offset 0 of a 1 GB and a 20 GB (``--big-log-gb``) 1-partition log
  produce_p1000           10. produce 1 KB records round-robin across 1000 partitions
Producer/consumer load comes from Kafka's own perf tools (Java, the first ``--kafka`` version's jars for
every broker), the rest from librdkafka. The loopback ceiling (iperf3, 1 stream) is the physical limit.
Prints a table with each broker's figure, the grete/Kafka ratios and the issue's targets; writes raw
JSON and a PNG to benchmarks/results/ and appends the table to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _compare_latency as lat  # noqa: E402
from benchmarks import _compare_report as report  # noqa: E402
from benchmarks import _compare_workloads as wl  # noqa: E402
from benchmarks._compare_brokers import Broker, Grete, Kafka, RssSampler, cpu_seconds  # noqa: E402
from tools import kafka_dist  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Side by side with Apache Kafka"
GB = 1024 ** 3

ACKS1 = {"acks": "1", "enable.idempotence": "false", "linger.ms": "5", "batch.size": "1048576",
         "max.request.size": "10485760", "buffer.memory": "268435456"}
ACKSALL = {"acks": "all", "linger.ms": "5", "batch.size": "1048576", "max.request.size": "10485760",
           "buffer.memory": "268435456"}  # idempotence on: the Java default
SMALL = {"acks": "1", "enable.idempotence": "false", "linger.ms": "0",
         "max.in.flight.requests.per.connection": "100"}
# Round robin, so each produce request carries batches for many partitions (the default sticky
# partitioner would fill one partition's batch at a time).
SPREAD = {"acks": "1", "enable.idempotence": "false", "linger.ms": "5",
          "partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner",
          "buffer.memory": "268435456"}
BIG_RECORD = 16 * 1024  # record size of the large-log preload: fewer client-side records per GB
# Batches of the large-log preload: small enough that whole batches fill a 1 MB Fetch. Kafka answers
# up to max_bytes and cuts the last batch; grete answers whole batches only, so with 1 MB batches
# the first Fetch of a log could carry 180 KB from grete against Kafka's 1 MB, timing different work.
BIG_BATCH = 64 * 1024

WORKLOADS = ("produce_acks1_p1", "produce_acks1_p8", "produce_acksall_p1", "produce_acksall_p8", "consume_p1",
             "small_p1", "e2e_latency", "empty_fetch", "group3", "fetch_latency", "produce_p1000")


@dataclass
class Settings:
    """Workload sizes: the defaults, or the --quick ones (every workload briefly, for smoke tests)."""

    duration: float
    warmup: float
    broker_warmup: float
    consume_records: int
    fetch_consumers: int
    fetch_wait_ms: int
    e2e_mb_per_s: float
    group_runs: int
    small_log_gb: float
    big_log_gb: float
    fetch_repeats: int
    client: str                 # Kafka version whose perf tools drive every broker
    selected: frozenset[str]

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        q = args.quick
        selected = frozenset(w for w in args.workloads.split(",") if w)
        unknown = selected - set(WORKLOADS)
        if unknown:
            raise SystemExit(f"unknown workloads {sorted(unknown)}; known: {', '.join(WORKLOADS)}")
        return cls(duration=args.duration or (3.0 if q else 10.0), warmup=args.warmup or (1.0 if q else 3.0),
                   broker_warmup=3.0 if q else 8.0, consume_records=50_000 if q else args.consume_records,
                   fetch_consumers=args.fetch_consumers, fetch_wait_ms=args.fetch_wait_ms,
                   e2e_mb_per_s=args.e2e_mb_per_s, group_runs=1 if q else 3,
                   small_log_gb=0.05 if q else 1.0, big_log_gb=0.2 if q else args.big_log_gb,
                   fetch_repeats=10 if q else 50, client=args.kafka.split(",")[0], selected=selected)

    def wants(self, name: str) -> bool:
        return not self.selected or name in self.selected


def timed(broker: Broker, result: dict[str, Any], name: str, fn: Any, *args: Any) -> None:
    """Run one workload, recording its figures and the broker's CPU seconds; a failure is recorded, not fatal."""
    cpu0, client0, busy0 = cpu_seconds(broker.pid), _client_cpu(), _machine_busy()
    t0 = time.monotonic()
    try:
        figures = fn(*args)
    except Exception as exc:  # keep going: one broken workload must not hide the others
        figures = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    figures["broker_cpu_s"] = cpu_seconds(broker.pid) - cpu0
    figures["wall_s"] = time.monotonic() - t0
    # Who else used the two cores: the stock client (perf tools are reaped children; librdkafka runs
    # in this process) and the whole machine, in cores busy on average.
    figures["client_cpu_s"] = round(_client_cpu() - client0, 2)
    figures["machine_busy_cores"] = round((_machine_busy() - busy0) / figures["wall_s"], 2)
    result[name] = figures
    shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}
    print(f"  [{broker.name}] {name}: {shown}", flush=True)


def _client_cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _machine_busy() -> float:
    """CPU seconds all cores spent not idle since boot (/proc/stat: idle and iowait excluded)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def run_broker(broker: Broker, s: Settings) -> dict[str, Any]:
    with broker:
        b, v, d, w = broker.bootstrap, s.client, s.duration, s.warmup
        result: dict[str, Any] = {"start": {"seconds": broker.start_seconds}}
        print(f"[{broker.name}] first acknowledged produce after {broker.start_seconds:.3f} s; "
              f"idle RSS {broker.idle_rss_mb:.1f} MB", flush=True)
        for topic, parts in (("p1", 1), ("p8", 8), ("all1", 1), ("all8", 8), ("cons", 1), ("small", 1),
                             ("idle", 1), ("warm", 1), ("e2e", 1), ("g3", 3), ("big", 1)):
            wl.create_topic(b, topic, parts)
        with RssSampler(broker.pid) as sampler:
            # Unmeasured: warms the JVM's JIT (and grete's caches) so the first measured run is not cold.
            timed(broker, result, "broker_warmup", wl.produce, b, v, "warm", 1024, ACKS1, s.broker_warmup, 1.0)
            for name, topic, props, size in (("produce_acks1_p1", "p1", ACKS1, 1024),
                                             ("produce_acks1_p8", "p8", ACKS1, 1024),
                                             ("produce_acksall_p1", "all1", ACKSALL, 1024),
                                             ("produce_acksall_p8", "all8", ACKSALL, 1024),
                                             ("small_p1", "small", SMALL, 100)):
                if s.wants(name):
                    timed(broker, result, name, wl.produce, b, v, topic, size, props, d, w)
            if s.wants("consume_p1"):
                timed(broker, result, "preload", wl.preload, b, v, "cons", s.consume_records, 1024)
                timed(broker, result, "consume_p1", wl.consume, b, v, "cons", s.consume_records)
            if s.wants("e2e_latency"):
                timed(broker, result, "e2e_latency", lat.end_to_end, b, "e2e", s.e2e_mb_per_s, d, w)
            if s.wants("empty_fetch"):
                timed(broker, result, "empty_fetch", wl.empty_fetches, b, "idle", s.fetch_consumers,
                      s.fetch_wait_ms, d)
            if s.wants("group3"):
                timed(broker, result, "group3_preload", _fill_partitions, b, "g3", 3)
                timed(broker, result, "group3", lat.group_start, b, "g3", s.group_runs)
            if s.wants("produce_p1000"):
                timed(broker, result, "p1000_create", _create_timed, b, "p1000", 1000)
                timed(broker, result, "produce_p1000", wl.produce, b, v, "p1000", 1024, SPREAD, d, w)
            if s.wants("fetch_latency"):
                _fetch_latency(broker, result, s)
        result["rss"] = {"idle_mb": broker.idle_rss_mb, "peak_mb": sampler.peak}
        return result


def _create_timed(bootstrap: str, topic: str, partitions: int) -> dict[str, Any]:
    """Create the topic, then write one record to every partition (librdkafka retries the ones not
    ready yet): the figure is creation to every partition accepting writes."""
    t0 = time.monotonic()
    wl.create_topic(bootstrap, topic, partitions)
    created = time.monotonic() - t0
    _fill_partitions(bootstrap, topic, partitions, 1)
    return {"seconds": time.monotonic() - t0, "create_s": created, "partitions": partitions}


def _fill_partitions(bootstrap: str, topic: str, partitions: int, per_partition: int = 10) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer(lat._quiet({"bootstrap.servers": bootstrap, "linger.ms": 5, "retry.backoff.ms": 10}))
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, f"r{p}-{i}".encode(), partition=p)
    left = producer.flush(60)
    if left:
        raise RuntimeError(f"{left} records not delivered")
    return {"records": per_partition * partitions}


def _fetch_latency(broker: Broker, result: dict[str, Any], s: Settings) -> None:
    """Fill one partition to ``small_log_gb``, time Fetch at offset 0, fill on to ``big_log_gb``
    (scaled down to what the disk holds, and said so), time again."""
    b, v = broker.bootstrap, s.client
    free_gb = shutil.disk_usage(tempfile.gettempdir()).free / GB
    big = min(s.big_log_gb, max(free_gb - 5.0, s.small_log_gb))  # leave 5 GB for everything else
    written = 0.0
    for name, target in (("fetch_small", s.small_log_gb), ("fetch_big", big)):
        records = int((target - written) * GB / BIG_RECORD)
        if records > 0:
            timed(broker, result, f"{name}_preload", wl.preload, b, v, "big", records, BIG_RECORD, BIG_BATCH)
            written += records * BIG_RECORD / GB
        timed(broker, result, name, lat.fetch_latency, b, "big", s.fetch_repeats)
        result[name]["log_gb"] = written
    if big < s.big_log_gb:
        result["fetch_big"]["scaled_down_from_gb"] = s.big_log_gb
        print(f"  only {free_gb:.0f} GB free: large log scaled from {s.big_log_gb:g} to {big:.1f} GB")


def loopback_ceiling(seconds: int = 5) -> float | None:
    """iperf3 over 127.0.0.1, one stream: GB/s received, or None if iperf3 is missing."""
    try:
        server = subprocess.Popen(["iperf3", "-s", "-1", "-p", "5299"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    except FileNotFoundError:
        return None
    try:
        time.sleep(0.3)
        out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", "5299", "-t", str(seconds), "-J"],
                             capture_output=True, text=True, timeout=seconds + 30)
        bits = json.loads(out.stdout)["end"]["sum_received"]["bits_per_second"]
        return float(bits) / 8 / 1e9
    finally:
        server.wait(timeout=10)


def environment(kafkas: list[str], client: str) -> dict[str, Any]:
    import confluent_kafka

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "grete"],
                           capture_output=True, text=True).stdout.strip()
    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cpus": os.cpu_count(), "grete_commit": commit + ("+dirty" if dirty else ""),
            "kafka": ", ".join(kafkas), "python": sys.version.split()[0],
            "java_client": f"kafka-clients {client} (perf tools)",
            "librdkafka": confluent_kafka.libversion()[0], "confluent_kafka": confluent_kafka.version()[0]}


def write_docs(env: dict[str, Any], table: list[list[str]], header: list[str], loopback: float | None,
               s: Settings, repeat: int, png: str) -> None:
    text = DOCS.read_text()
    if SECTION not in text:
        text = text.rstrip("\n") + "\n\n" + SECTION + " — `benchmarks/compare.py`\n\n"
    run = (f"\n### Run of {env['date']}\n\n{env['cpus']} CPUs; grete {env['grete_commit']}, Kafka "
           f"{env['kafka']} (JVM as `kafka-server-start.sh` ships it: `{' '.join(kafka_dist.KAFKA_SERVER_JVM)}`); "
           f"clients: {env['java_client']}, librdkafka "
           f"{env['librdkafka']}; Python {env['python']}. {repeat} run(s) per broker "
           f"(figures: median [min..max]); {s.duration:g} s per timed workload after {s.warmup:g} s "
           f"warm-up; consume of {s.consume_records:,} records; {s.fetch_consumers} idle consumers, "
           f"fetch.wait.max.ms={s.fetch_wait_ms}; end-to-end at {s.e2e_mb_per_s:g} MB/s; logs of "
           f"{s.small_log_gb:g} and {s.big_log_gb:g} GB. Loopback ceiling (iperf3, 1 stream): "
           f"{f'{loopback:.2f} GB/s' if loopback else 'not measured'}.\n\n"
           f"{report.markdown_table(table, header)}\n\n![grete vs Kafka]({png})\n")
    start = text.index(SECTION)
    nxt = text.find("\n## ", start + len(SECTION))
    end = len(text) if nxt < 0 else nxt
    text = text[:end].rstrip("\n") + "\n" + run + text[end:]
    DOCS.write_text(text if text.endswith("\n") else text + "\n")


def brokers(args: argparse.Namespace) -> list[tuple[str, Any]]:
    """(column name, factory) in run order: grete, the baseline grete if any, each Kafka version."""
    out: list[tuple[str, Any]] = []
    if args.only in (None, "grete"):
        out.append(("grete", lambda: Grete(shlex.split(args.grete_prefix))))
        if args.baseline:
            out.append(("grete-base", lambda: Grete(shlex.split(args.grete_prefix), root=Path(args.baseline),
                                                    name="grete-base")))
    if args.only in (None, "kafka"):
        for version in args.kafka.split(","):
            out.append((f"kafka-{version}", lambda version=version: Kafka(version)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kafka", default="4.3.1", help="comma-separated; the first is the reference "
                        "for ratios and verdicts and its perf tools drive every broker")
    parser.add_argument("--repeat", type=int, default=1, help="run the broker sequence N times")
    parser.add_argument("--quick", action="store_true", help="every workload briefly (smoke test)")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds per timed workload (10; quick 2)")
    parser.add_argument("--warmup", type=float, default=0.0, help="seconds dropped first (3; quick 1)")
    parser.add_argument("--consume-records", type=int, default=2_000_000)
    parser.add_argument("--fetch-consumers", type=int, default=16)
    parser.add_argument("--fetch-wait-ms", type=int, default=1)
    parser.add_argument("--e2e-mb-per-s", type=float, default=10.0)
    parser.add_argument("--big-log-gb", type=float, default=20.0, help="the large log of workload 9")
    parser.add_argument("--only", choices=["grete", "kafka"])
    parser.add_argument("--baseline", default="", help="another grete checkout, run as column grete-base")
    parser.add_argument("--grete-prefix", default="", help="command prefix for grete (a profiler)")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--workloads", default="", help=f"comma-separated subset of: {', '.join(WORKLOADS)}")
    args = parser.parse_args()
    s = Settings.from_args(args)
    kafkas = args.kafka.split(",")

    env = environment(kafkas, s.client)
    loopback = loopback_ceiling(2 if args.quick else 5)
    print(f"loopback ceiling (iperf3 1 stream): {loopback:.2f} GB/s" if loopback else "iperf3 missing")
    plan = brokers(args)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in plan}
    for r in range(args.repeat):
        for name, factory in plan:
            print(f"== run {r + 1}/{args.repeat}: {name}", flush=True)
            runs[name].append(run_broker(factory(), s))

    header, table = report.rows(runs, [n for n, _ in plan])
    print(f"\n{env}\nloopback ceiling: {loopback and round(loopback, 2)} GB/s\n")
    print(report.text_table(table, header))
    for failure in report.errors(runs):
        print(f"FAILED {failure}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = {"environment": env, "loopback_gb_per_s": loopback, "args": vars(args),
           "settings": {k: v for k, v in vars(s).items() if k != "selected"}, "runs": runs,
           "table": [header, *table]}
    (RESULTS / f"compare-{stamp}.json").write_text(json.dumps(raw, indent=2) + "\n")
    png = RESULTS / f"compare-{stamp}.png"
    report.plot(runs, [n for n, _ in plan], png)
    print(f"\nraw: {RESULTS / f'compare-{stamp}.json'}\nplot: {png}")
    if not args.no_docs and not args.only and not s.selected and not args.quick:
        write_docs(env, table, header, loopback, s, args.repeat, f"../benchmarks/results/{png.name}")


if __name__ == "__main__":
    main()
