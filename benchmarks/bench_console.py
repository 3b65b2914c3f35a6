"""Server time to render the console page (target: under 200 ms for 1,000 partitions and 100 groups).

An in-process single node with ``--topics`` topics of ``--partitions`` partitions each, ``--groups``
groups each with committed offsets on ``--offsets`` partitions (lag rows), and a full ring of chart
samples. Each render is timed on the broker's loop (data assembly + template + SVG), as a request
to ``console.listener`` runs it, without the socket: wall time, and the loop thread's CPU time, which
a machine loaded by other work does not inflate.

    python -m benchmarks.bench_console [--topics 10] [--partitions 100] [--groups 100] [--offsets 10] [--renders 30]

Prints JSON (docs/benchmarks.md, "Console page").
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from grete.broker.console.samples import CAPACITY, SampleRing
from grete.broker.console.server import render_page
from grete.coordinator.groups.group_types import OffsetCommit
from grete.testing import broker


async def _commit(b: Any, group: int, offsets: int, topics: int, partitions: int) -> None:
    commits = [OffsetCommit(f"t{(group + i) % topics}", (group * 7 + i) % partitions, i) for i in range(offsets)]
    await b.broker.group_coordinator.commit_offsets(group_id=f"group-{group:03d}", generation_id=-1, member_id="",
                                                    group_instance_id=None, retention_ms=-1, offsets=commits)


def _full_ring(b: Any) -> SampleRing:
    ring = SampleRing()
    now = time.monotonic()
    for i in range(CAPACITY):  # one sample a second, growing counters
        b.broker.metrics.totals.bytes_in += 1000 + i
        ring.take(b.broker.metrics, now - CAPACITY + i)
    return ring


async def _timed(b: Any, ring: SampleRing) -> tuple[float, float, int]:
    """(wall ms, the loop thread's CPU ms, page bytes) of one render."""
    started, cpu = time.perf_counter(), time.thread_time()
    html = await render_page(b.broker, ring)
    return (time.perf_counter() - started) * 1000, (time.thread_time() - cpu) * 1000, len(html.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--offsets", type=int, default=10)
    parser.add_argument("--renders", type=int, default=30)
    args = parser.parse_args()
    topics = {f"t{i}": args.partitions for i in range(args.topics)}
    with broker({"console.listener": "127.0.0.1:0"}, topics=topics, start_timeout=120) as b:
        for group in range(args.groups):
            b.call(_commit, b, group, args.offsets, args.topics, args.partitions)
        ring = _full_ring(b)
        b.call(_timed, b, ring)  # warm: the template compiles on import, the first render allocates
        times, cpu, size = [], [], 0
        for _ in range(args.renders):
            elapsed, used, size = b.call(_timed, b, ring)
            times.append(elapsed)
            cpu.append(used)
    times.sort()
    cpu.sort()
    print(json.dumps({
        "partitions": args.topics * args.partitions, "groups": args.groups,
        "lag_rows": args.groups * args.offsets, "html_bytes": size, "renders": args.renders,
        "ms_median": round(statistics.median(times), 1), "ms_p95": round(times[int(0.95 * (len(times) - 1))], 1),
        "ms_max": round(times[-1], 1), "cpu_ms_median": round(statistics.median(cpu), 1),
        "cpu_ms_p95": round(cpu[int(0.95 * (len(cpu) - 1))], 1), "target_ms": 200,
    }, indent=2))


if __name__ == "__main__":
    main()
