"""Where grete's time goes in one compare.py workload: py-spy samples the broker while the workload runs.

    python -m benchmarks._compare_profile empty_fetch [--duration 10] [--out /tmp/grete-empty.txt]
    python -m benchmarks._compare_profile produce_acks1_p1
    python -m benchmarks._compare_profile produce_p1000

Prints the top functions by own (self) samples and by inclusive samples; the raw collapsed stacks go to
``--out`` (flamegraph.pl / speedscope can read them).
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _compare_workloads as wl  # noqa: E402
from benchmarks._compare_brokers import Grete  # noqa: E402
from benchmarks.compare import ACKS1, SPREAD, _create_timed  # noqa: E402


def summarize(collapsed: Path, top: int) -> None:
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        total += n
        own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    print(f"{total} samples")
    for title, counter in (("own", own), ("inclusive", incl)):
        print(f"\n-- top {top} by {title} samples --")
        for frame, n in counter.most_common(top):
            print(f"{100 * n / total:5.1f}%  {frame[:150]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=["empty_fetch", "produce_acks1_p1", "produce_p1000"])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--kafka", default="4.3.1")
    parser.add_argument("--out", default="/tmp/grete-profile.txt")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--wait-ms", type=int, default=1, help="fetch.wait.max.ms for empty_fetch")
    args = parser.parse_args()
    out = Path(args.out)
    with Grete() as broker:
        if args.workload == "produce_p1000":
            _create_timed(broker.bootstrap, "t", 1000)
        else:
            wl.create_topic(broker.bootstrap, "t", 1)
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(broker.pid), "--rate", "250", "--format", "raw",
                                "--output", str(out), "--duration", str(int(args.duration + 4))],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if args.workload == "empty_fetch":
            print(wl.empty_fetches(broker.bootstrap, "t", 16, args.wait_ms, args.duration))
        else:
            props = SPREAD if args.workload == "produce_p1000" else ACKS1
            print(wl.produce(broker.bootstrap, args.kafka, "t", 1024, props, args.duration, 2.0))
        spy.wait(timeout=120)
    summarize(out, args.top)


if __name__ == "__main__":
    main()
