"""How long a broker holds an empty Fetch for a given ``max_wait_ms``: grete against Apache Kafka.

    python benchmarks/bench_fetch_wait.py [--kafka 4.3.1] [--waits 0,1,2,5,100] [--repeats 300]

One connection, one request at a time: a Fetch v12 of an idle partition at its end offset, repeated;
prints min / p10 / median / p90 of the round trip per ``max_wait_ms``. The ``max_wait_ms=0`` row is the
bare round trip. Kafka expires a waiting fetch at the start of the millisecond tick its deadline falls
in (a timing wheel of 1 ms ticks), so its 1 ms wait lasts 0-1 ms; this is what grete's
``handlers/fetch.py`` ``expiry`` copies and what this script checks on both brokers. Raw JSON goes to
``benchmarks/results/fetch-wait-<UTC time>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import _compare_workloads as wl  # noqa: E402
from benchmarks._compare_brokers import Broker, Grete, Kafka  # noqa: E402
from grete.protocol.messages import FetchRequest, FetchResponse  # noqa: E402
from grete.testing._wire import Wire  # noqa: E402

VERSION = 12  # topic names, no topic ids: works on both brokers without a metadata look-up


def _request(topic: str, max_wait_ms: int) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])


def _round_trips(wire: Wire, topic: str, max_wait_ms: int, repeats: int) -> list[float]:
    request = _request(topic, max_wait_ms)
    out = []
    for _ in range(repeats):
        started = time.perf_counter()
        response = wire.call(request, FetchResponse, VERSION)
        out.append((time.perf_counter() - started) * 1000)
        if response.responses[0].partitions[0].error_code:
            raise RuntimeError(f"fetch failed: {response}")
    return out


def _summary(ms: list[float]) -> dict[str, float]:
    q = statistics.quantiles(ms, n=10)
    return {"min": min(ms), "p10": q[0], "median": statistics.median(ms), "p90": q[-1]}


def measure(broker: Broker, waits: list[int], repeats: int) -> dict[int, dict[str, float]]:
    wl.create_topic(broker.bootstrap, "idle", 1)
    host, port = broker.bootstrap.rsplit(":", 1)
    wire = Wire(host, int(port))
    try:
        _round_trips(wire, "idle", 0, 50)  # warm-up (JIT, first-use imports)
        return {w: _summary(_round_trips(wire, "idle", w, repeats)) for w in waits}
    finally:
        wire.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kafka", default="4.3.1")
    parser.add_argument("--waits", default="0,1,2,5,100")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    waits = [int(w) for w in args.waits.split(",")]
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": {}}
    for broker in (Grete(), Kafka(args.kafka)):
        with broker:
            results["runs"][broker.name] = measure(broker, waits, args.repeats)
    print("| broker | max_wait_ms | min | p10 | median | p90 (ms) |\n|---|---|---|---|---|---|")
    for name, rows in results["runs"].items():
        for wait, s in rows.items():
            print(f"| {name} | {wait} | {s['min']:.3f} | {s['p10']:.3f} | {s['median']:.3f} | {s['p90']:.3f} |")
    out = REPO / "benchmarks" / "results" / f"fetch-wait-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(results, indent=1))
    print(f"raw: {out}")


if __name__ == "__main__":
    main()
