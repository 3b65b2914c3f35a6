"""Event delay of the KafkaDirect paper (section 5.4): event generation -> Spark reads the event.

    python benchmarks/bench_spark_delay.py [--duration 40] [--warmup 5] [--brokers grete,kafka-4]
    python benchmarks/bench_spark_delay.py --cluster --kill-leader-at 20 --duration 40 --jvm-warmup 20

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

``--cluster``: each broker kind is a fresh 3-broker cluster per workload instead (``grete``: a grete
cluster, grete.testing.cluster; ``kafka-3.9``: Apache Kafka 3.9.2 in ZooKeeper mode,
tools/reference_kafka_zk.py), topics with replication factor 3 and min.insync.replicas 2, the constant
rate only by default. With ``--kill-leader-at S`` the leader of the flow topic is SIGKILLed S seconds
into publishing, and the result adds the delay around the kill: median/p99/max of events generated
10 to 2 s before it, the peak after it, how long until delays are back under twice that p99, the
same for the producer's share alone (the topics use LogAppendTime, so ``append - generation`` is the
producer's share and ``read - append`` Spark's), the moment the new leader shows in Metadata, the
first append on it and the first read of an event appended after the kill, per-second bins of the
delay, and Spark's progress of the micro-batches that ran across the kill.
``--jvm-warmup S`` first runs S unmeasured seconds on the first broker, so that it does not pay
for Spark's cold JVM alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipelines.traffic import generator, topics  # noqa: E402
from pipelines.traffic.session import spark_session  # noqa: E402
from tools.kafka_admin import create_topic  # noqa: E402
from tools.testwait import wait_until  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
WORKLOADS = ("constant-rate", "periodic-burst")
# The clusters of --cluster: RF 3 topics whose acks=all writes survive one broker's loss.
CLUSTER_CONFIG = {"default.replication.factor": "3", "min.insync.replicas": "2",
                  "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3"}
BIN_S = 1.0  # width of the delay-over-time bins around the kill
IN_FLIGHT_MS = 2000  # events generated this long before the kill may still be in flight at it
BEFORE_MS = 8000  # the span before that whose delays are "normal" at the kill
NORMAL_FACTOR = 2.0  # "back to normal": delays under this x the p99 before the kill


@dataclass
class Target:
    """A broker or cluster under test: its bootstrap, and (clusters) a way to SIGKILL broker ``id``."""
    bootstrap: str
    kill: Callable[[int], None] | None = None


@dataclass
class Kill:
    """What the kill thread saw, wall-clock ms."""
    at_ms: float = 0.0
    victim: int = -1
    victim_topics: list[str] = field(default_factory=list)
    new_leader: int = -1
    new_leader_ms: float | None = None
    error: str | None = None


@contextlib.contextmanager
def start_broker(kind: str) -> Iterator[Target]:
    """A fresh single broker of ``kind`` ("grete" or "kafka-<version>")."""
    if kind == "grete":
        from grete.testing import broker

        with broker(subprocess=True) as b:
            yield Target(str(b.bootstrap_servers))
        return
    from tools.reference_kafka import ReferenceKafka

    with ReferenceKafka(kind.removeprefix("kafka-"), log_level="WARN") as ref:
        yield Target(ref.bootstrap)


@contextlib.contextmanager
def start_cluster(kind: str) -> Iterator[Target]:
    """A fresh 3-broker cluster of ``kind`` ("grete" or "kafka-3.9", ZooKeeper mode)."""
    if kind == "grete":
        from grete.testing.cluster import cluster

        with cluster(3, overrides=CLUSTER_CONFIG) as running:
            yield Target(running.bootstrap_servers, running.kill_broker)
        return
    from tools.reference_kafka_zk import kafka_zk_cluster

    with kafka_zk_cluster(3, overrides=CLUSTER_CONFIG, version=kind.removeprefix("kafka-")) as zk_running:
        yield Target(zk_running.bootstrap_servers, zk_running.kill_broker)


def delay_query(spark: Any, bootstrap: str, topic_names: list[str], name: str, trigger: str) -> Any:
    """Both topics through Spark's Kafka source; per row: read time (ms, per-row JVM clock) and the
    generation time from the event; collected in a memory sink."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", ",".join(topic_names)).option("startingOffsets", "latest")
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
    """``create_lags``: record timestamp - generation time, the producer-side part of the delay (with
    CreateTime the producer's clock at send(), with LogAppendTime the leader's at the append)."""
    d, c = sorted(delays), sorted(create_lags)
    return {"events": len(d), "median_ms": statistics.median(d) if d else None, "p99_ms": percentile(d, 99),
            "max_ms": d[-1] if d else None, "create_lag_median_ms": statistics.median(c) if c else None}


def leader_of(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=5)
    return int(meta.topics[topic].partitions[0].leader)


def kill_leader(target: Target, topic: str, others: list[str], seen: Kill) -> None:
    """SIGKILL ``topic``'s leader; record when Metadata names another one (polled every 50 ms)."""
    assert target.kill is not None
    seen.victim = leader_of(target.bootstrap, topic)
    seen.victim_topics = [t for t in [topic, *others] if leader_of(target.bootstrap, t) == seen.victim]
    seen.at_ms = time.time() * 1000
    target.kill(seen.victim)

    def moved() -> bool:
        with contextlib.suppress(Exception):  # a bootstrap server is dead: librdkafka may time out
            seen.new_leader = leader_of(target.bootstrap, topic)
        return seen.new_leader not in (seen.victim, -1)

    wait_until(moved, timeout=60, what=f"a new leader of {topic}")
    seen.new_leader_ms = time.time() * 1000


def schedule_kill(target: Target, at_s: float, topic: str, others: list[str]) -> tuple[threading.Thread, Kill]:
    seen = Kill()

    def body() -> None:
        time.sleep(at_s)  # a timer, not a synchronisation: the kill lands at_s into the run
        try:
            kill_leader(target, topic, others, seen)
        except Exception as exc:  # reported in the result rather than lost in a thread
            seen.error = repr(exc)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, seen


def create_run_topics(target: Target, names: list[str], cluster: bool) -> None:
    if not cluster:
        for t in names:
            create_topic(target.bootstrap, t, config={"message.timestamp.type": "CreateTime"})
        return
    topics.ensure_topics(target.bootstrap, dict.fromkeys(names, {"message.timestamp.type": "LogAppendTime"}),
                         replication_factor=3, min_insync=2)
    for t in names:
        topics.end_offsets(target.bootstrap, t)  # until each has a leader


def run_one(spark: Any, target: Target, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    flow, speed = f"ndwflow-{tag}", f"ndwspeed-{tag}"
    create_run_topics(target, [flow, speed], args.cluster)
    name = f"delay_{tag}"
    query = delay_query(spark, target.bootstrap, [flow, speed], name, args.trigger)
    while query.lastProgress is None and query.isActive:  # the first batch pins "latest"
        time.sleep(0.1)
    send, flush = generator.kafka_sender(target.bootstrap)
    plan = generator.Plan(mode=workload, duration=args.duration, rate=args.rate, burst_volume=args.burst_volume,
                          flow_topic=flow, speed_topic=speed)
    started_ns = time.time_ns()
    killer = schedule_kill(target, args.kill_leader_at, flow, [speed]) if args.kill_leader_at is not None else None
    stats = generator.run(plan, send)
    flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until every published event has been read
        if spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0].n >= stats.sent:
            break
        time.sleep(0.5)
    failed = query.exception()
    query.stop()
    cutoff = started_ns + int(args.warmup * 1e9)
    rows = spark.sql(f"SELECT read_ms, gen_ns, kafka_ms, topic FROM {name} WHERE gen_ns >= {cutoff}").collect()
    spark.catalog.dropTempView(name)
    result = summarise([r.read_ms - r.gen_ns / 1e6 for r in rows], [r.kafka_ms - r.gen_ns / 1e6 for r in rows])
    result.update(published=stats.sent, bursts=len(stats.bursts), burst_times=stats.bursts,
                  query_error=None if failed is None else str(failed))
    if killer is not None:
        killer[0].join(90)
        events = [Event(r.gen_ns / 1e6, r.kafka_ms, r.read_ms, r.topic) for r in rows]
        result["failover"] = failover(events, killer[1], flow, query.recentProgress)
    return result


@dataclass(frozen=True)
class Event:
    gen_ms: float
    append_ms: float
    read_ms: float
    topic: str

    @property
    def delay(self) -> float:
        return self.read_ms - self.gen_ms


def failover(events: list[Event], kill: Kill, victim_topic: str, progress: list[Any]) -> dict[str, Any]:
    """The delay around ``kill``: just before it, its peak after, the recovery, and where the time went."""
    if kill.error is not None or not kill.at_ms:
        return {"error": kill.error or "no kill"}
    at = kill.at_ms
    # Before: generated in the BEFORE_MS ahead of the in-flight margin (a run may still be draining
    # the backlog of its start, so its first seconds are no measure of "normal" at the kill).
    before = [e for e in events if at - IN_FLIGHT_MS - BEFORE_MS <= e.gen_ms < at - IN_FLIGHT_MS]
    after = [e for e in events if e.gen_ms >= at - IN_FLIGHT_MS]
    delays, lags = sorted(e.delay for e in before), sorted(e.append_ms - e.gen_ms for e in before)
    normal, normal_lag = NORMAL_FACTOR * percentile(delays, 99), NORMAL_FACTOR * percentile(lags, 99)
    late = [e for e in after if e.delay > normal]
    held = [e for e in after if e.append_ms - e.gen_ms > normal_lag]  # by the producer
    on_new_leader = [e for e in events if e.topic == victim_topic and e.append_ms > at]

    def rel(ms: float | None) -> float | None:
        return None if ms is None else round(ms - at, 1)

    return {
        "victim": kill.victim, "victim_topics": kill.victim_topics, "new_leader": kill.new_leader,
        "before": {"events": len(delays), "median_ms": statistics.median(delays) if delays else None,
                   "p99_ms": percentile(delays, 99), "max_ms": delays[-1] if delays else None,
                   "append_lag_p99_ms": percentile(lags, 99)},
        "peak_after_ms": max((e.delay for e in after), default=None),
        "peak_append_lag_after_ms": max((e.append_ms - e.gen_ms for e in after), default=None),
        "normal_ms": normal, "late_events": len(late),
        # Relative to the kill: events generated after this all had normal delays again ...
        "recovered_gen_ms": rel(max(e.gen_ms for e in late)) if late else None,
        # ... and Spark read the last late event then.
        "recovered_read_ms": rel(max(e.read_ms for e in late)) if late else None,
        # Events generated after this were appended as promptly as before the kill.
        "producer_recovered_gen_ms": rel(max(e.gen_ms for e in held)) if held else None,
        "new_leader_in_metadata_ms": rel(kill.new_leader_ms),
        "first_append_on_new_leader_ms": rel(min((e.append_ms for e in on_new_leader), default=None)),
        "first_read_from_new_leader_ms": rel(min((e.read_ms for e in on_new_leader), default=None)),
        "bins": delay_bins(events, at),
        "batches": batches_around(progress, at),
    }


def delay_bins(events: list[Event], at: float) -> list[dict[str, Any]]:
    """Per BIN_S of generation time relative to the kill: events, median and max delay, and the
    largest producer share (append - generation)."""
    bins: dict[int, list[Event]] = {}
    for e in events:
        bins.setdefault(int((e.gen_ms - at) // (BIN_S * 1000)), []).append(e)
    return [{"from_s": k * BIN_S, "events": len(v), "median_ms": round(statistics.median(e.delay for e in v), 1),
             "max_ms": round(max(e.delay for e in v), 1),
             "max_append_lag_ms": round(max(e.append_ms - e.gen_ms for e in v), 1)}
            for k, v in sorted(bins.items())]


def batches_around(progress: list[Any], at: float, window_ms: float = 30000) -> list[dict[str, Any]]:
    """Spark's progress of the micro-batches that started within ``window_ms`` after the kill or
    were running at it: start relative to the kill, and their durationMs (latestOffset is the
    driver's offset lookup, addBatch the executors' fetch and the sink)."""
    from datetime import datetime

    out = []
    for p in progress:
        start = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp() * 1000
        took = p.durationMs.get("triggerExecution", 0)
        if start + took >= at and start <= at + window_ms:
            out.append({"batch": p.batchId, "start_ms": round(start - at), "rows": p.numInputRows,
                        "durations_ms": dict(p.durationMs)})
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| broker | workload | events | median ms | p99 ms | max ms |", "|---|---|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['broker']} | {r['workload']} | {r['events']} | {fmt(r['median_ms'])} | "
                     f"{fmt(r['p99_ms'])} | {fmt(r['max_ms'])} |")
    return "\n".join(lines)


def fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def failover_table(results: list[dict[str, Any]]) -> str:
    lines = ["| cluster | before: median / p99 / max ms | peak after ms | back to normal (gen / read) s | "
             "peak append lag s | producer normal s | new leader in Metadata s | first append on it s | "
             "first read from it s |", "|---|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in results:
        f = r.get("failover")
        if not f or "error" in f:
            continue
        b = f["before"]

        def s(ms: float | None) -> str:
            return "-" if ms is None else f"{ms / 1000:.2f}"
        lines.append(f"| {r['broker']} | {fmt(b['median_ms'])} / {fmt(b['p99_ms'])} / {fmt(b['max_ms'])} | "
                     f"{fmt(f['peak_after_ms'])} | {s(f['recovered_gen_ms'])} / {s(f['recovered_read_ms'])} | "
                     f"{s(f['peak_append_lag_after_ms'])} | {s(f['producer_recovered_gen_ms'])} | "
                     f"{s(f['new_leader_in_metadata_ms'])} | {s(f['first_append_on_new_leader_ms'])} | "
                     f"{s(f['first_read_from_new_leader_ms'])} |")
    return "\n".join(lines)


def warm_up(spark: Any, target: Target, args: argparse.Namespace) -> None:
    """An unmeasured run of ``--jvm-warmup`` seconds: the first measured broker then finds Spark's
    JVM as warm as the later ones do (a cold one reads far slower for its first tens of seconds)."""
    quiet = argparse.Namespace(**{**vars(args), "duration": args.jvm_warmup, "kill_leader_at": None})
    run_one(spark, target, "constant-rate", quiet)


def run_all(spark: Any, args: argparse.Namespace) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    cold = args.jvm_warmup > 0
    for kind in args.brokers.split(","):
        with contextlib.ExitStack() as stack:
            target = None if args.cluster else stack.enter_context(start_broker(kind))
            for workload in args.workloads.split(","):
                t0 = time.monotonic()
                with start_cluster(kind) if args.cluster else contextlib.nullcontext(target) as running:
                    assert running is not None
                    if cold:
                        warm_up(spark, running, args)
                        cold, t0 = False, time.monotonic()
                    r = run_one(spark, running, workload, args)
                r.update(broker=kind, workload=workload, seconds=round(time.monotonic() - t0, 1))
                print(json.dumps(r), file=sys.stderr, flush=True)
                results.append(r)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=40.0, help="seconds of publishing per workload")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of events dropped at the start")
    p.add_argument("--rate", type=float, default=400.0, help="constant rate, messages/s")
    p.add_argument("--burst-volume", type=int, default=34, help="periodic burst: volume iterations (x 380 msgs)")
    p.add_argument("--brokers", help="default grete,kafka-4; with --cluster grete,kafka-3.9")
    p.add_argument("--workloads", help="default both; with --cluster constant-rate")
    p.add_argument("--trigger", default="0 seconds", help="processingTime trigger")
    p.add_argument("--cluster", action="store_true", help="3-broker clusters, RF 3, min.insync.replicas 2")
    p.add_argument("--kill-leader-at", type=float, help="with --cluster: SIGKILL the flow topic's leader "
                                                        "this many seconds into publishing")
    p.add_argument("--jvm-warmup", type=float, default=0.0,
                   help="seconds of an unmeasured run on the first broker before the measured ones")
    args = p.parse_args(argv)
    if args.kill_leader_at is not None and not args.cluster:
        p.error("--kill-leader-at needs --cluster")
    args.brokers = args.brokers or ("grete,kafka-3.9" if args.cluster else "grete,kafka-4")
    args.workloads = args.workloads or ("constant-rate" if args.cluster else ",".join(WORKLOADS))
    spark = spark_session("grete-spark-delay")
    # Keep the progress of every micro-batch of a run (100 by default; trigger 0 runs many more).
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "5000")
    results = run_all(spark, args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"spark-delay-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    params = dict(vars(args))
    out.write_text(json.dumps({"params": params, "results": results}, indent=2) + "\n")
    print(table(results))
    if args.kill_leader_at is not None:
        print("\n" + failover_table(results))
    print(f"\nraw: {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
