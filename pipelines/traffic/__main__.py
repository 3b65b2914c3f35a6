"""The traffic pipeline's command line. From the repository root, against a running grete:

    python -m pipelines.traffic run --bootstrap 127.0.0.1:9092                 # end to end, ~1 minute
    python -m pipelines.traffic generate --bootstrap ... --mode periodic-burst --duration 60
    python -m pipelines.traffic stream --bootstrap ... --checkpoint /tmp/traffic-ckpt
    python -m pipelines.traffic batch --bootstrap ... --topic ndwflow --start 0 --end 100

``run`` creates the topics if missing (ndwflow, ndwspeed as CreateTime; metrics as LogAppendTime,
like OSPBench), starts the streaming job, publishes for --duration seconds, lets the job drain, then
checks the output (every emitted window joined all lanes of its site) and runs both batch reads.
It exits non-zero when a check fails.
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

from pipelines.traffic import batch, generator, streaming
from pipelines.traffic.data import FLOW_TOPIC, OUTPUT_TOPIC, SPEED_TOPIC

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def ensure_topics(bootstrap: str, topics: dict[str, dict[str, str]], partitions: int = 1) -> None:
    """Create the topics that do not exist yet (1 partition, RF 1, with the given configs)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    have = set(admin.list_topics(timeout=10).topics)
    new = [NewTopic(t, num_partitions=partitions, replication_factor=1, config=c)
           for t, c in topics.items() if t not in have]
    for future in admin.create_topics(new, operation_timeout=30).values() if new else ():
        future.result(timeout=30)


def end_offsets(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """{partition: (log start, high watermark)} through a plain consumer."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "traffic-offsets", "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in parts}
    finally:
        c.close()


def publish(args: argparse.Namespace) -> generator.Stats:
    send, flush = generator.kafka_sender(args.bootstrap)
    plan = generator.Plan(mode=args.mode, duration=args.duration, rate=args.rate,
                          burst_volume=args.burst_volume, flow_topic=args.flow_topic,
                          speed_topic=args.speed_topic)
    stats = generator.run(plan, send)
    left = flush()
    if left:
        raise RuntimeError(f"{left} messages not delivered")
    return stats


def check_output(spark: SparkSession, args: argparse.Namespace, start: dict[int, tuple[int, int]]) -> dict[str, object]:
    """Read what the job wrote (exact offsets from before the run to now) and check each window."""
    now = end_offsets(args.bootstrap, args.output_topic)
    ranges = {p: (start.get(p, (0, 0))[1], hw) for p, (_, hw) in now.items()}
    rows = batch.by_offsets(spark, args.bootstrap, args.output_topic, ranges).collect()
    values = [(json.loads(r["value"]), r["timestamp"]) for r in rows]
    complete = sum(1 for v, _ in values if len(v["lanes"]) == v["numLanes"])
    latency = [ts.timestamp() * 1000 - v["publishTimestamp"] for v, ts in values]
    return {"output_rows": len(values), "complete_windows": complete,
            "latency_ms_median": round(statistics.median(latency), 1) if latency else None}


def check_batch(spark: SparkSession, args: argparse.Namespace, before: dict[int, tuple[int, int]],
                started_ms: int) -> dict[str, dict[str, object]]:
    """The two batch reads over the flow topic: an exact 100-offset range, and from the run's start time."""
    first = before.get(0, (0, 0))[1]
    exact = batch.summary(batch.by_offsets(spark, args.bootstrap, args.flow_topic, {0: (first, first + 100)}))
    by_time = batch.summary(batch.from_timestamp(spark, args.bootstrap, args.flow_topic, {0: started_ms}))
    return {"exact_range": exact, "from_timestamp": by_time}


def cmd_run(args: argparse.Namespace) -> int:
    from pipelines.traffic.session import spark_session

    ensure_topics(args.bootstrap, {args.flow_topic: {"message.timestamp.type": "CreateTime"},
                                   args.speed_topic: {"message.timestamp.type": "CreateTime"},
                                   args.output_topic: {"message.timestamp.type": "LogAppendTime"}})
    spark = spark_session("grete-traffic-run")
    before = {t: end_offsets(args.bootstrap, t) for t in (args.flow_topic, args.output_topic)}
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="traffic-ckpt-")
    query = streaming.start(spark, args.bootstrap, checkpoint, args.output_topic, starting="latest",
                            flow_topic=args.flow_topic, speed_topic=args.speed_topic)
    while query.lastProgress is None and query.isActive:  # the first (empty) batch pins "latest"
        time.sleep(0.2)
    started_ms = int(time.time() * 1000)
    stats = publish(args)
    drained = threading.Event()
    threading.Timer(args.drain, drained.set).start()
    while not drained.is_set() and query.isActive:
        time.sleep(0.5)
    error = query.exception()
    query.stop()
    if error is not None:
        print(f"streaming query failed: {error}", file=sys.stderr)
        return 1
    out = check_output(spark, args, before[args.output_topic])
    batches = check_batch(spark, args, before[args.flow_topic], started_ms)
    report = {"published": stats.sent, "bursts": len(stats.bursts), **out, **batches}
    print(json.dumps(report, indent=2, default=str))
    ok = (out["output_rows"] and out["complete_windows"] == out["output_rows"]
          and batches["exact_range"]["records"] == 100
          and batches["from_timestamp"]["records"] == stats.sent // 2)
    print("OK" if ok else "FAILED: see the report above", file=sys.stderr)
    return 0 if ok else 1


def cmd_generate(args: argparse.Namespace) -> int:
    stats = publish(args)
    print(json.dumps({"published": stats.sent, "bursts": stats.bursts}))
    return 0


def cmd_stream(args: argparse.Namespace) -> int:
    from pipelines.traffic.session import spark_session

    spark = spark_session("grete-traffic-stream")
    query = streaming.start(spark, args.bootstrap, args.checkpoint, args.output_topic, starting=args.starting,
                            available_now=args.available_now, flow_topic=args.flow_topic,
                            speed_topic=args.speed_topic)
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    from pipelines.traffic.session import spark_session

    spark = spark_session("grete-traffic-batch")
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
    gen = argparse.ArgumentParser(add_help=False)
    gen.add_argument("--mode", choices=("constant-rate", "periodic-burst"), default="constant-rate")
    gen.add_argument("--duration", type=float, default=30.0, help="seconds of publishing")
    gen.add_argument("--rate", type=float, default=400.0, help="paced messages/s (both topics)")
    gen.add_argument("--burst-volume", type=int, default=34, help="volume iterations per burst (x 380 msgs)")
    r = sub.add_parser("run", parents=[common, gen], help="end to end against a running broker")
    r.add_argument("--checkpoint", default=None, help="default: a fresh temporary directory")
    r.add_argument("--drain", type=float, default=10.0, help="seconds the job runs after publishing")
    r.set_defaults(fn=cmd_run, duration=20.0)
    g = sub.add_parser("generate", parents=[common, gen], help="publish flow and speed events")
    g.set_defaults(fn=cmd_generate)
    s = sub.add_parser("stream", parents=[common], help="run the streaming job until Ctrl-C")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--starting", default="latest")
    s.add_argument("--available-now", action="store_true")
    s.set_defaults(fn=cmd_stream)
    b = sub.add_parser("batch", parents=[common], help="batch read of one partition's range")
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
