"""grete side by side with Apache Kafka: same machine, same data disk, same clients, one broker at a time.

    python -m benchmarks.compare [--kafka 4.3.1] [--duration 10] [--warmup 3] [--consume-records 500000]
                                 [--only grete|kafka] [--no-docs] [--grete-prefix "py-spy record -o x.svg --"]

For each broker in turn (grete first, then Kafka), start it in a fresh temp dir and run:
  1. produce 1 KB records, acks=1, no idempotence, linger.ms=5, batch.size=1 MB, 1 and 8 partitions
  2. the same with acks=all and idempotence (the Java defaults)
  3. consume a preloaded 1-partition topic (kafka-consumer-perf-test)
  4. small requests: 100 B records, linger.ms=0, 100 requests in flight
  6. empty Fetch requests/s: N librdkafka consumers polling an idle partition
  7. start to first acknowledged produce; idle RSS; peak RSS over all workloads
Producer/consumer load comes from Kafka's own perf tools (Java, same version as the broker), the rest
from librdkafka. The loopback ceiling (iperf3, 5 s) is printed as the physical limit. Prints a table
with grete/Kafka ratios and the issue's targets; writes raw JSON and a PNG to benchmarks/results/ and
appends the table to the "Side by side with Apache Kafka" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import _compare_report as report  # noqa: E402
from benchmarks import _compare_workloads as wl  # noqa: E402
from benchmarks._compare_brokers import Broker, Grete, Kafka, RssSampler, cpu_seconds  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DOCS = ROOT / "docs" / "benchmarks.md"
SECTION = "## Side by side with Apache Kafka"

ACKS1 = {"acks": "1", "enable.idempotence": "false", "linger.ms": "5", "batch.size": "1048576",
         "max.request.size": "10485760", "buffer.memory": "268435456"}
ACKSALL = {"acks": "all", "linger.ms": "5", "batch.size": "1048576", "max.request.size": "10485760",
           "buffer.memory": "268435456"}  # idempotence on: the Java default
SMALL = {"acks": "1", "enable.idempotence": "false", "linger.ms": "0",
         "max.in.flight.requests.per.connection": "100"}


SELECTED: set[str] = set()  # --workloads; empty means all


def timed(broker: Broker, result: dict[str, Any], name: str, fn: Any, *args: Any) -> None:
    """Run one workload, recording its figures and the broker's CPU seconds; a failure is recorded, not fatal."""
    if SELECTED and name not in SELECTED and name != "broker_warmup":
        return
    cpu0 = cpu_seconds(broker.pid)
    t0 = time.monotonic()
    try:
        figures = fn(*args)
    except Exception as exc:  # keep going: one broken workload must not hide the others
        figures = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
    figures["broker_cpu_s"] = cpu_seconds(broker.pid) - cpu0
    figures["wall_s"] = time.monotonic() - t0
    result[name] = figures
    shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}
    print(f"  [{broker.name}] {name}: {shown}", flush=True)


def run_broker(broker: Broker, args: argparse.Namespace) -> dict[str, Any]:
    with broker:
        b, v = broker.bootstrap, args.kafka
        result: dict[str, Any] = {"start": {"seconds": broker.start_seconds}}
        print(f"[{broker.name}] first acknowledged produce after {broker.start_seconds:.3f} s; "
              f"idle RSS {broker.idle_rss_mb:.1f} MB", flush=True)
        for topic, parts in (("p1", 1), ("p8", 8), ("all1", 1), ("all8", 8), ("cons", 1), ("small", 1),
                             ("idle", 1), ("warm", 1)):
            wl.create_topic(b, topic, parts)
        with RssSampler(broker.pid) as sampler:
            d, w = args.duration, args.warmup
            # Unmeasured: warms the JVM's JIT (and grete's caches) so the first measured run is not cold.
            timed(broker, result, "broker_warmup", wl.produce, b, v, "warm", 1024, ACKS1, args.broker_warmup, 1.0)
            timed(broker, result, "produce_acks1_p1", wl.produce, b, v, "p1", 1024, ACKS1, d, w)
            timed(broker, result, "produce_acks1_p8", wl.produce, b, v, "p8", 1024, ACKS1, d, w)
            timed(broker, result, "produce_acksall_p1", wl.produce, b, v, "all1", 1024, ACKSALL, d, w)
            timed(broker, result, "produce_acksall_p8", wl.produce, b, v, "all8", 1024, ACKSALL, d, w)
            timed(broker, result, "preload", wl.preload, b, v, "cons", args.consume_records, 1024)
            timed(broker, result, "consume_p1", wl.consume, b, v, "cons", args.consume_records)
            timed(broker, result, "small_p1", wl.produce, b, v, "small", 100, SMALL, d, w)
            timed(broker, result, "empty_fetch", wl.empty_fetches, b, "idle", args.fetch_consumers,
                  args.fetch_wait_ms, d)
        result["rss"] = {"idle_mb": broker.idle_rss_mb, "peak_mb": sampler.peak}
        return result


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


def environment(kafka_version: str) -> dict[str, Any]:
    import confluent_kafka

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "grete"],
                           capture_output=True, text=True).stdout.strip()
    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cpus": os.cpu_count(), "grete_commit": commit + ("+dirty" if dirty else ""),
            "kafka": kafka_version, "python": sys.version.split()[0],
            "java_client": f"kafka-clients {kafka_version} (perf tools)",
            "librdkafka": confluent_kafka.libversion()[0], "confluent_kafka": confluent_kafka.version()[0] if isinstance(confluent_kafka.version(), tuple) else str(confluent_kafka.version())}


def write_docs(env: dict[str, Any], table: list[list[str]], loopback: float | None, args: argparse.Namespace,
               png: str) -> None:
    text = DOCS.read_text()
    if SECTION not in text:
        text = text.rstrip("\n") + "\n\n" + SECTION + " — `benchmarks/compare.py`\n\n" + INTRO + "\n"
    run = (f"\n### Run of {env['date']}\n\n{env['cpus']} CPUs; grete {env['grete_commit']}, Kafka "
           f"{env['kafka']} (JVM `-Xmx512m -XX:+UseSerialGC`); clients: {env['java_client']}, librdkafka "
           f"{env['librdkafka']}; Python {env['python']}. {args.duration:g} s per producer run after "
           f"{args.warmup:g} s warm-up; consume of {args.consume_records:,} records; "
           f"{args.fetch_consumers} idle consumers, fetch.wait.max.ms={args.fetch_wait_ms}. "
           f"Loopback ceiling (iperf3, 1 stream): "
           f"{f'{loopback:.2f} GB/s' if loopback else 'not measured'}.\n\n"
           f"{report.markdown_table(table)}\n\n![grete vs Kafka]({png})\n")
    start = text.index(SECTION)
    nxt = text.find("\n## ", start + len(SECTION))
    end = len(text) if nxt < 0 else nxt
    text = text[:end].rstrip("\n") + "\n" + run + text[end:]
    DOCS.write_text(text if text.endswith("\n") else text + "\n")


INTRO = """grete and the reference Kafka run one after the other on this machine, each in a fresh temp dir on
the same disk, under the same stock clients: Kafka's `kafka-producer-perf-test` /
`kafka-consumer-perf-test` (Java, same version as the broker, full JIT) and librdkafka. Producer rates
are duration-bound (the tool's 1 s reports after a warm-up). Consume is `fetch.MB.sec` (group join
excluded). Empty fetches are counted by librdkafka's own per-broker request statistics. Start-up is
process start to the first acknowledged produce (Kafka: after `kafka-storage format`). RSS is VmRSS of
the broker process (for Kafka, the JVM). Raw JSON and plots in `benchmarks/results/`. Targets are the
benchmark issue's; they are reported, never asserted."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kafka", default="4.3.1")
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--broker-warmup", type=float, default=8.0, help="unmeasured produce seconds first")
    parser.add_argument("--consume-records", type=int, default=500_000)
    parser.add_argument("--fetch-consumers", type=int, default=16)
    parser.add_argument("--fetch-wait-ms", type=int, default=1)
    parser.add_argument("--only", choices=["grete", "kafka"])
    parser.add_argument("--grete-prefix", default="", help="command prefix for grete (a profiler)")
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--workloads", default="", help="comma-separated subset, e.g. empty_fetch,small_p1")
    args = parser.parse_args()
    SELECTED.update(w for w in args.workloads.split(",") if w)
    if "consume_p1" in SELECTED:
        SELECTED.add("preload")  # consume reads what preload wrote

    env = environment(args.kafka)
    loopback = loopback_ceiling()
    print(f"loopback ceiling (iperf3 1 stream): {loopback:.2f} GB/s" if loopback else "iperf3 missing")
    results: dict[str, dict[str, Any]] = {"grete": {}, "kafka": {}}
    if args.only != "kafka":
        results["grete"] = run_broker(Grete(shlex.split(args.grete_prefix)), args)
    if args.only != "grete":
        results["kafka"] = run_broker(Kafka(args.kafka), args)

    table = report.rows(results["grete"], results["kafka"])
    print(f"\n{env}\n")
    print(report.text_table(table))
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = {"environment": env, "loopback_gb_per_s": loopback, "args": vars(args), **results}
    (RESULTS / f"compare-{stamp}.json").write_text(json.dumps(raw, indent=2) + "\n")
    png = RESULTS / f"compare-{stamp}.png"
    report.plot(results["grete"], results["kafka"], f"kafka {args.kafka}", png)
    print(f"\nraw: {RESULTS / f'compare-{stamp}.json'}\nplot: {png}")
    if not args.no_docs and not args.only and not SELECTED:
        write_docs(env, table, loopback, args, f"../benchmarks/results/{png.name}")


if __name__ == "__main__":
    main()
