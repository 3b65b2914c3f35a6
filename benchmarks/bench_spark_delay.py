"""Event delay of the KafkaDirect paper (section 5.4): event generation -> Spark reads the event.

    python benchmarks/bench_spark_delay.py [--duration 40] [--warmup 5] [--brokers grete,kafka-4]

For each broker (grete, then Apache Kafka 4.3.1 from tools/reference_kafka.py, one after the other in
this one process) and each workload (OSPBench constant rate at 400 msg/s; periodic burst every 10 s on
the same baseline), the traffic generator of pipelines/traffic publishes flow and speed JSON events
that carry their generation wall-clock time (``gen_ns``). A Structured Streaming query reads both
topics with Spark's Kafka source (trigger ProcessingTime(0), as OSPBench) and stamps every row with
``System.currentTimeMillis()`` evaluated per row in the scan's projection, i.e. when Spark reads it;
delay = read time - generation time (one host, one clock). Events generated in the first --warmup
seconds are dropped. Writes raw JSON to benchmarks/results/spark-delay-<UTC time>.json and prints a
markdown table (median and p99 per broker and workload). Takes about
brokers x workloads x (duration + 15 s) plus the JVM start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipelines.traffic import generator  # noqa: E402
from pipelines.traffic.session import spark_session  # noqa: E402
from tools.kafka_admin import create_topic  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
WORKLOADS = ("constant-rate", "periodic-burst")


@contextlib.contextmanager
def start_broker(kind: str) -> Iterator[str]:
    """Yields the bootstrap address of a fresh broker of ``kind`` ("grete" or "kafka-<version>")."""
    if kind == "grete":
        from grete.testing import broker

        with broker(subprocess=True) as b:
            yield str(b.bootstrap_servers)
        return
    from tools.reference_kafka import ReferenceKafka

    with ReferenceKafka(kind.removeprefix("kafka-"), log_level="WARN") as ref:
        yield ref.bootstrap


def delay_query(spark: Any, bootstrap: str, topics: list[str], name: str, trigger: str) -> Any:
    """Both topics through Spark's Kafka source; per row: read time (ms, per-row JVM clock) and the
    generation time from the event; collected in a memory sink."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", ",".join(topics)).option("startingOffsets", "latest")
           .option("kafkaConsumer.pollTimeoutMs", "10000").load())
    rows = raw.select(
        F.expr("CAST(reflect('java.lang.System', 'currentTimeMillis') AS BIGINT)").alias("read_ms"),
        F.get_json_object(F.col("value").cast("string"), "$.gen_ns").cast("long").alias("gen_ns"),
        F.unix_millis("timestamp").alias("kafka_ms"),
        "topic",
    )
    return (rows.writeStream.format("memory").queryName(name).outputMode("append")
            .trigger(processingTime=trigger).start())


def percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[i]


def summarise(delays: list[float], create_lags: list[float]) -> dict[str, Any]:
    """``create_lags``: record CreateTime - generation time, the producer-side part of the delay."""
    d, c = sorted(delays), sorted(create_lags)
    return {"events": len(d), "median_ms": statistics.median(d) if d else None, "p99_ms": percentile(d, 99),
            "max_ms": d[-1] if d else None, "create_lag_median_ms": statistics.median(c) if c else None}


def run_one(spark: Any, bootstrap: str, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    flow, speed = f"ndwflow-{tag}", f"ndwspeed-{tag}"
    for t in (flow, speed):
        create_topic(bootstrap, t, config={"message.timestamp.type": "CreateTime"})
    name = f"delay_{tag}"
    query = delay_query(spark, bootstrap, [flow, speed], name, args.trigger)
    while query.lastProgress is None and query.isActive:  # the first batch pins "latest"
        time.sleep(0.1)
    send, flush = generator.kafka_sender(bootstrap)
    plan = generator.Plan(mode=workload, duration=args.duration, rate=args.rate, burst_volume=args.burst_volume,
                          flow_topic=flow, speed_topic=speed)
    started_ns = time.time_ns()
    stats = generator.run(plan, send)
    flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until every published event has been read
        if spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0].n >= stats.sent:
            break
        time.sleep(0.5)
    query.stop()
    cutoff = started_ns + int(args.warmup * 1e9)
    rows = spark.sql(f"SELECT read_ms, gen_ns, kafka_ms FROM {name} WHERE gen_ns >= {cutoff}").collect()
    spark.catalog.dropTempView(name)
    result = summarise([r.read_ms - r.gen_ns / 1e6 for r in rows], [r.kafka_ms - r.gen_ns / 1e6 for r in rows])
    result.update(published=stats.sent, bursts=len(stats.bursts), burst_times=stats.bursts)
    return result


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| broker | workload | events | median ms | p99 ms | max ms |", "|---|---|---:|---:|---:|---:|"]
    for r in results:
        def f(v: Any) -> str:
            return "-" if v is None else f"{v:.1f}"
        lines.append(f"| {r['broker']} | {r['workload']} | {r['events']} | {f(r['median_ms'])} | "
                     f"{f(r['p99_ms'])} | {f(r['max_ms'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=40.0, help="seconds of publishing per workload")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of events dropped at the start")
    p.add_argument("--rate", type=float, default=400.0, help="constant rate, messages/s")
    p.add_argument("--burst-volume", type=int, default=34, help="periodic burst: volume iterations (x 380 msgs)")
    p.add_argument("--brokers", default="grete,kafka-4")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--trigger", default="0 seconds", help="processingTime trigger")
    args = p.parse_args(argv)
    spark = spark_session("grete-spark-delay")
    results: list[dict[str, Any]] = []
    for kind in args.brokers.split(","):
        with start_broker(kind) as bootstrap:
            for workload in args.workloads.split(","):
                t0 = time.monotonic()
                r = run_one(spark, bootstrap, workload, args)
                r.update(broker=kind, workload=workload, seconds=round(time.monotonic() - t0, 1))
                print(json.dumps(r), file=sys.stderr, flush=True)
                results.append(r)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"spark-delay-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    params = dict(vars(args))
    out.write_text(json.dumps({"params": params, "results": results}, indent=2) + "\n")
    print(table(results))
    print(f"\nraw: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
