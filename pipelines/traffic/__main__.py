"""The traffic pipeline's command line. From the repository root, against a running grete:

    python -m pipelines.traffic run --bootstrap 127.0.0.1:9092                 # end to end, ~1 minute
    python -m pipelines.traffic generate --bootstrap ... --mode periodic-burst --duration 60
    python -m pipelines.traffic stream --bootstrap ... --checkpoint /tmp/traffic-ckpt
    python -m pipelines.traffic batch --bootstrap ... --topic ndwflow --start 0 --end 100

``run`` creates the topics if missing (ndwflow, ndwspeed as CreateTime; metrics as LogAppendTime,
like OSPBench; --partitions, and the cluster's default replication factor and min.insync.replicas
unless --replication-factor / --min-insync-replicas say otherwise), starts the streaming job,
publishes for --duration seconds and ends the input (generator.end_input), waits until the job has
processed everything, then reads input and output back with a plain consumer and compares the output
window by window with the reference computed from the input (reference.py), and runs both batch
reads. It exits non-zero when a check fails. ``--master`` runs the Spark commands on a cluster
(``spark://host:7077``) instead of ``local[2]``; ``--conf KEY=VALUE`` sets any Spark setting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from typing import TYPE_CHECKING

from pipelines.traffic import batch, generator, reference, streaming, topics
from pipelines.traffic.data import FLOW_TOPIC, OUTPUT_TOPIC, SPEED_TOPIC
from pipelines.traffic.session import DEFAULT_MASTER, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def create_topics(args: argparse.Namespace) -> list[str]:
    """The run's topics, if missing, with --partitions, --replication-factor, --min-insync-replicas."""
    return topics.ensure_topics(
        args.bootstrap, {args.flow_topic: {"message.timestamp.type": "CreateTime"},
                         args.speed_topic: {"message.timestamp.type": "CreateTime"},
                         args.output_topic: {"message.timestamp.type": "LogAppendTime"}},
        args.partitions, args.replication_factor, args.min_insync_replicas)


def publish(args: argparse.Namespace, end: bool) -> generator.Stats:
    """Publish for --duration seconds; with ``end``, then close the last windows (generator.end_input)."""
    send, flush = generator.kafka_sender(args.bootstrap)
    plan = generator.Plan(mode=args.mode, duration=args.duration, rate=args.rate,
                          burst_volume=args.burst_volume, flow_topic=args.flow_topic,
                          speed_topic=args.speed_topic)
    stats = generator.run(plan, send)
    left = flush()
    if left:
        raise RuntimeError(f"{left} messages not delivered")
    if end and stats.last_second is not None:
        generator.end_input(args.bootstrap, plan, stats.last_second)
    return stats


def drain(query: StreamingQuery, timeout: float) -> BaseException | None:
    """Wait until the job has processed everything published (including the batch that closes the
    windows the end of input passed), at most ``timeout`` seconds; returns the job's error."""
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            query.processAllAvailable()
        except Exception as exc:  # the query failed
            errors.append(exc)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(timeout)
    if waiter.is_alive():
        errors.append(TimeoutError(f"the job did not process its input within {timeout}s"))
    error = query.exception() or (errors[0] if errors else None)
    query.stop()
    return error


def check_batch(spark: SparkSession, args: argparse.Namespace, run: topics.Ranges,
                started_ms: int) -> dict[str, dict[str, object]]:
    """The two batch reads over the flow topic: up to 100 offsets of partition 0 from the run's first,
    and from the run's start time (every record of the run)."""
    first, end = run.get(0, (0, 0))
    last = min(first + 100, end)
    exact = batch.summary(batch.by_offsets(spark, args.bootstrap, args.flow_topic, {0: (first, last)}))
    by_time = batch.summary(batch.from_timestamp(spark, args.bootstrap, args.flow_topic,
                                                 dict.fromkeys(run, started_ms)))
    return {"exact_range": {**exact, "expected": last - first},
            "from_timestamp": {**by_time, "expected": sum(e - s for s, e in run.values())}}


def start_job(spark: SparkSession, args: argparse.Namespace, checkpoint: str) -> StreamingQuery:
    """The streaming job over the run's topics; from ``checkpoint`` where it has one, else from the
    topics' latest offsets."""
    return streaming.start(spark, args.bootstrap, checkpoint, args.output_topic, starting="latest",
                           flow_topic=args.flow_topic, speed_topic=args.speed_topic)


def snapshot(args: argparse.Namespace) -> dict[str, topics.Ranges]:
    """The end offsets of the run's three topics, taken before the run to tell its records apart."""
    return {t: topics.end_offsets(args.bootstrap, t) for t in (args.flow_topic, args.speed_topic, args.output_topic)}


def latency_figures(output: list[topics.Record]) -> dict[str, object]:
    """OSPBench's latency (output timestamp - publishTimestamp) over the output records, in ms."""
    latency = [r.timestamp_ms - json.loads(r.value)["publishTimestamp"] for r in output]
    return {"output_records": len(latency),
            "latency_ms_median": round(statistics.median(latency), 1) if latency else None,
            "latency_ms_max": max(latency) if latency else None}


def verify(spark: SparkSession, args: argparse.Namespace, before: dict[str, topics.Ranges],
           stats: generator.Stats, started_ms: int) -> tuple[dict[str, object], bool]:
    """Read the run's input and output back and check the output against the reference
    (reference.py), and the two batch reads; returns (report, passed)."""
    ranges = {t: topics.run_ranges(b, topics.end_offsets(args.bootstrap, t)) for t, b in before.items()}
    read = {t: topics.read_range(args.bootstrap, t, r) for t, r in ranges.items()}
    verdict = reference.check(read[args.flow_topic], read[args.speed_topic], read[args.output_topic],
                              sent=stats.sent)
    batches = check_batch(spark, args, ranges[args.flow_topic], started_ms)
    report = {"published": stats.sent, "bursts": len(stats.bursts), **verdict.summary(),
              **latency_figures(read[args.output_topic]), **batches}
    ok = verdict.ok and all(b["records"] == b["expected"] for b in batches.values())
    return report, ok


def run(spark: SparkSession, args: argparse.Namespace) -> tuple[dict[str, object], bool]:
    """Start the job, publish, drain, then check its output against the reference (reference.py) and
    the two batch reads; returns (report, passed)."""
    before = snapshot(args)
    query = start_job(spark, args, args.checkpoint or tempfile.mkdtemp(prefix="traffic-ckpt-"))
    query.processAllAvailable()  # the first (empty) batch pins "latest" before anything is published
    started_ms = int(time.time() * 1000)
    stats = publish(args, end=True)
    error = drain(query, args.drain)
    if error is not None:
        return {"published": stats.sent, "error": str(error)}, False
    return verify(spark, args, before, stats, started_ms)


def spark_conf(args: argparse.Namespace) -> dict[str, str]:
    """The --conf KEY=VALUE options as Spark settings."""
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--conf {item}: expected KEY=VALUE")
        conf[key] = value
    return conf


def cmd_run(args: argparse.Namespace) -> int:
    create_topics(args)
    report, ok = run(spark_session("grete-traffic-run", args.master, spark_conf(args)), args)
    print(json.dumps(report, indent=2, default=str))
    print("OK" if ok else "FAILED: see the report above", file=sys.stderr)
    return 0 if ok else 1


def cmd_generate(args: argparse.Namespace) -> int:
    stats = publish(args, end=args.end_input)
    print(json.dumps({"published": stats.sent, "bursts": stats.bursts}))
    return 0


def cmd_stream(args: argparse.Namespace) -> int:
    spark = spark_session("grete-traffic-stream", args.master, spark_conf(args))
    query = streaming.start(spark, args.bootstrap, args.checkpoint, args.output_topic, starting=args.starting,
                            available_now=args.available_now, flow_topic=args.flow_topic,
                            speed_topic=args.speed_topic)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    spark = spark_session("grete-traffic-batch", args.master, spark_conf(args))
    if args.timestamp_ms is not None:
        df = batch.from_timestamp(spark, args.bootstrap, args.topic, {args.partition: args.timestamp_ms})
    else:
        df = batch.by_offsets(spark, args.bootstrap, args.topic, {args.partition: (args.start, args.end)})
    print(json.dumps(batch.summary(df), default=str))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipelines.traffic", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap", default="127.0.0.1:9092")
    common.add_argument("--flow-topic", default=FLOW_TOPIC)
    common.add_argument("--speed-topic", default=SPEED_TOPIC)
    common.add_argument("--output-topic", default=OUTPUT_TOPIC)
    on_spark = argparse.ArgumentParser(add_help=False)
    on_spark.add_argument("--master", default=DEFAULT_MASTER,
                          help="Spark master URL, e.g. spark://host:7077 for a standalone cluster")
    on_spark.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                          help="a Spark setting (repeatable), e.g. spark.executor.memory=2g")
    gen = argparse.ArgumentParser(add_help=False)
    gen.add_argument("--mode", choices=("constant-rate", "periodic-burst"), default="constant-rate")
    gen.add_argument("--duration", type=float, default=30.0, help="seconds of publishing")
    gen.add_argument("--rate", type=float, default=400.0, help="paced messages/s (both topics)")
    gen.add_argument("--burst-volume", type=int, default=34, help="volume iterations per burst (x 380 msgs)")
    r = sub.add_parser("run", parents=[common, on_spark, gen], help="end to end against a running broker")
    r.add_argument("--checkpoint", default=None, help="default: a fresh temporary directory")
    r.add_argument("--drain", type=float, default=120.0,
                   help="seconds the job may take to process everything after publishing")
    r.add_argument("--partitions", type=int, default=1, help="partitions of topics it creates")
    r.add_argument("--replication-factor", type=int, default=topics.CLUSTER_DEFAULT_RF,
                   help="of topics it creates (default: the broker's default.replication.factor)")
    r.add_argument("--min-insync-replicas", type=int, default=None,
                   help="min.insync.replicas of topics it creates (default: the broker's)")
    r.set_defaults(fn=cmd_run, duration=20.0)
    g = sub.add_parser("generate", parents=[common, gen], help="publish flow and speed events")
    g.add_argument("--end-input", action="store_true",
                   help="end with a record per partition that closes the last windows")
    g.set_defaults(fn=cmd_generate)
    s = sub.add_parser("stream", parents=[common, on_spark], help="run the streaming job until Ctrl-C")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--starting", default="latest")
    s.add_argument("--available-now", action="store_true")
    s.set_defaults(fn=cmd_stream)
    b = sub.add_parser("batch", parents=[common, on_spark], help="batch read of one partition's range")
    b.add_argument("--topic", default=FLOW_TOPIC)
    b.add_argument("--partition", type=int, default=0)
    b.add_argument("--start", type=int, default=-2, help="first offset (-2: earliest)")
    b.add_argument("--end", type=int, default=-1, help="offset after the last (-1: latest)")
    b.add_argument("--timestamp-ms", type=int, default=None, help="start by timestamp instead")
    b.set_defaults(fn=cmd_batch)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
