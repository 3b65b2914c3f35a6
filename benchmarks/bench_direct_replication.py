"""Replication push (direct path, shm) against Kafka's follower fetch, in a 3-broker grete cluster
(docs/benchmarks.md, "Replication push"):

* acks=all, RF 3, min.insync.replicas=2: produce throughput of an idempotent confluent-kafka
  producer, ``--records`` records of ``--size`` bytes over 3 partitions;
* per-record acks=all latency (p50/p99) of 2000 records sent at a steady 1000 records/s;
* what carried the data: the leaders' pushes and pushed bytes, the followers' fetched record bytes.

Both clusters run the same settings (``direct.transports=shm`` included); only
``direct.replication.enable`` differs. Rounds alternate push and fetch, so drifts of the machine
hit both alike.

    python -m benchmarks.bench_direct_replication [--rounds 3] [--records 20000] [--size 1024] [--credits 8]

The machine has 2 cores: three brokers and the client share them. Prints one JSON line per round
and the medians; writes benchmarks/results/direct-replication-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
from typing import Any

from benchmarks.bench_cluster import OVERRIDES, RESULTS, create_topic, latency, produce
from grete.testing.cluster import GreteCluster, cluster, free_port

MODES = {"fetch": "false", "push": "true"}


def counters(running: GreteCluster) -> dict[str, float]:
    """The replication counters summed over the brokers."""
    total: dict[str, float] = {}
    for broker in running.brokers:
        url = running.broker_items(broker)["metrics.listener"] + "/metrics"
        with urllib.request.urlopen(url, timeout=10) as answer:
            for line in answer.read().decode().splitlines():
                if line.startswith(("grete_direct_replication_", "kafka_server_fetcherstats_bytespersec_total")):
                    name, value = line.rsplit(" ", 1)
                    total[name] = total.get(name, 0.0) + float(value)
    return total


def one_round(mode: str, n: int, records: int, size: int, credits: int) -> dict[str, Any]:
    overrides = {**OVERRIDES, "direct.transports": "shm", "direct.replication.enable": MODES[mode],
                 "direct.replication.credits": str(credits)}
    metrics = {b: {"metrics.listener": f"http://127.0.0.1:{free_port()}"} for b in (1, 2, 3)}
    with cluster(3, overrides=overrides, broker_overrides=metrics) as running:
        topic = f"bench-{n}"
        create_topic(running.bootstrap_servers, topic)
        time.sleep(1.5)  # followers that caught up by fetching register for push (push mode)
        before = counters(running)
        result: dict[str, Any] = {"mode": mode, "round": n}
        result.update(produce(running.bootstrap_servers, topic, records, size))
        result.update(latency(running.bootstrap_servers, topic, 2000, size, 1000))
        after = counters(running)
    moved = {k.removeprefix("grete_direct_replication_").removesuffix("_total"): after.get(k, 0.0) - before.get(k, 0.0)
             for k in after}
    result.update(pushes=moved.get("pushes", 0.0), pushed_mb=moved.get("push_bytes", 0.0) / 1e6,
                  fetched_mb=moved.get("kafka_server_fetcherstats_bytespersec", 0.0) / 1e6,
                  fallbacks=moved.get("push_fallbacks", 0.0))
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--credits", type=int, default=8, help="direct.replication.credits")
    args = parser.parse_args()
    results = []
    for n in range(args.rounds):
        for mode in (("push", "fetch") if n % 2 else ("fetch", "push")):
            result = one_round(mode, n, args.records, args.size, args.credits)
            print(json.dumps(result), flush=True)
            results.append(result)
    medians = {mode: {key: statistics.median(r[key] for r in results if r["mode"] == mode)
                      for key in ("mb_per_s", "p50_ms", "p99_ms", "pushes", "pushed_mb", "fetched_mb", "fallbacks")}
               for mode in MODES}
    print(json.dumps({"medians": medians}, indent=1))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"direct-replication-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps({"args": vars(args), "rounds": results, "medians": medians}, indent=1))


if __name__ == "__main__":
    main()
