"""What a tight ``queued.max.request.bytes`` costs produce throughput (docs/benchmarks.md, "Request
memory bound").

Each round starts ``grete serve`` once unbounded (-1, Kafka's default) and once with the bound given,
creates a topic of 6 partitions, and runs ``--producers`` producer processes at once (acks=1,
confluent-kafka: requests of up to ~1 MB), as benchmarks/bench_scaling.py does. Under the bound a
request is admitted whole while any memory is left and connections wait while the pool is exhausted
(KIP-72), so the bound paces the producers instead of stalling them.

    python -m benchmarks.bench_request_memory [--bound 2097152] [--rounds 1] [--records 20000]

Writes benchmarks/results/request-memory-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_scaling import producers_mb_per_s
from grete.testing.process import broker_process

RESULTS = Path(__file__).parent / "results"


def one_round(bound: int, n: int, producers: int, records: int, size: int) -> dict[str, Any]:
    with broker_process({"queued.max.request.bytes": str(bound)}) as running:
        mb_per_s = producers_mb_per_s(running.bootstrap_servers, f"memory-{n}", producers, records, size)
    return {"queued.max.request.bytes": bound, "round": n, "mb_per_s": round(mb_per_s, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bound", type=int, default=2 * 1024 * 1024)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--producers", type=int, default=3)
    parser.add_argument("--size", type=int, default=10240)
    args = parser.parse_args()
    results = []
    for n in range(args.rounds):
        for bound in (-1, args.bound):  # alternated, so drifts of the machine hit both alike
            result = one_round(bound, n, args.producers, args.records, args.size)
            print(json.dumps(result), flush=True)
            results.append(result)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"request-memory-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(
        json.dumps({"args": vars(args), "rounds": results}, indent=1))


if __name__ == "__main__":
    main()
