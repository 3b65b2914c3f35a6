"""What metrics cost the broker (the target: at most 2 % of produce/consume), in CPU time,
which a loaded machine does not distort the way it distorts throughput:

1. counting: the exact counter updates one Produce and one Fetch request make (the request count,
   the per-topic counters, the four phase histograms, the error count), timed in-process, against
2. the broker's whole CPU time per request on the same paths (``bench_request_cpu``: Produce
   requests of one 100-byte record and empty Fetch requests, the cheapest requests there are, so
   that share is an upper bound; and Produce requests of 100-record batches, as clients batch);
3. exposition: the broker's CPU time per scrape of ``GET /metrics`` with ``--topics`` topics, spread
   over Prometheus' default 15 s scrape interval, against one busy core.

    python -m benchmarks.bench_metrics [--topics 100] [--scrapes 200] [--requests 50000]

Prints JSON (docs/benchmarks.md, "What metrics cost").
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from time import perf_counter, process_time

from benchmarks.bench_request_cpu import cpu_seconds
from grete.broker.metrics.broker_metrics import BrokerMetrics
from grete.testing import _wire

ROOT = Path(__file__).resolve().parent.parent
SCRAPE_INTERVAL_S = 15.0


def counting_us(iterations: int) -> dict[str, float]:
    """CPU microseconds of the counter updates of one Produce and of one repeated empty Fetch (the
    memo path bench_request_cpu measures: the request is counted, not timed)."""
    metrics = BrokerMetrics()
    metrics.topic("bench")

    def one(api_key: int, version: int, produce: bool) -> None:
        counters = metrics.request(api_key, version)
        if not produce:
            return  # a repeated empty Fetch is answered from the connection's memo: counted only
        if produce:
            metrics.produced("bench", 1, 100)
        else:
            metrics.fetched("bench", 0, False)
        errors = counters.errors
        errors[0] = errors.get(0, 0) + 1
        started = perf_counter()  # the four phases the connection observes per answer
        phases = counters.phases
        phases["localtimems"].observe((perf_counter() - started) * 1000)
        phases["remotetimems"].observe(0.0)
        phases["responsesendtimems"].observe(0.0)
        phases["totaltimems"].observe((perf_counter() - started) * 1000)

    found = {}
    for name, api_key, version, produce in (("produce", 0, 9, True), ("fetch", 1, 12, False)):
        for _ in range(1000):
            one(api_key, version, produce)
        began = process_time()
        for _ in range(iterations):
            one(api_key, version, produce)
        found[name] = (process_time() - began) / iterations * 1e6
    return found


def request_cpu_us(requests: int, records: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_request_cpu", "--requests", str(requests),
                           "--records", str(records)], cwd=ROOT, capture_output=True, text=True, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"produce": result["produce_cpu_us_per_request"], "fetch": result["fetch_cpu_us_per_request"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape_cpu_ms(topics: int, scrapes: int) -> dict[str, float]:
    """Broker CPU per GET /metrics with ``topics`` topics that have taken traffic."""
    port, metrics_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as data:
        child = subprocess.Popen([sys.executable, "-m", "grete.cli", "serve", "--override",
                                  f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}",
                                  "--override", f"metrics.listener=http://127.0.0.1:{metrics_port}",
                                  "--log-level", "WARNING"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(url, timeout=5).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            for n in range(topics):
                _wire.create_topic("127.0.0.1", port, f"topic-{n}", 1, {})
            size = len(urllib.request.urlopen(url, timeout=5).read())
            began = cpu_seconds(child.pid)
            for _ in range(scrapes):
                urllib.request.urlopen(url, timeout=10).read()
            per_scrape = (cpu_seconds(child.pid) - began) / scrapes * 1000
        finally:
            child.terminate()
            child.wait(30)
    return {"cpu_ms_per_scrape": per_scrape, "bytes_per_scrape": size}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--requests", type=int, default=50_000)
    args = parser.parse_args()
    counting = counting_us(200_000)
    whole = request_cpu_us(args.requests, 1)
    batched = request_cpu_us(args.requests // 5, 100)
    scrape = scrape_cpu_ms(args.topics, args.scrapes)
    print(json.dumps({
        "counting_cpu_us_per_request": {k: round(v, 3) for k, v in counting.items()},
        "broker_cpu_us_per_request": whole,
        "counting_share_percent": {k: round(100 * counting[k] / whole[k], 2) for k in counting},
        "broker_cpu_us_per_request_100_record_batches": batched,
        "counting_share_percent_100_record_batches": round(100 * counting["produce"] / batched["produce"], 2),
        "scrape": {k: round(v, 2) for k, v in scrape.items()},
        "scrape_share_of_one_core_percent": round(100 * scrape["cpu_ms_per_scrape"] / 1000 / SCRAPE_INTERVAL_S, 3),
        "topics": args.topics,
    }, indent=1))


if __name__ == "__main__":
    main()
