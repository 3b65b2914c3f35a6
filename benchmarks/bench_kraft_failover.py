"""Active-controller failover in a KRaft controller quorum: SIGKILL of the quorum's leader to a new
leader answering DescribeQuorum, for three grete controllers and three Apache Kafka 4.3.1
controllers, alternating round by round so both see the same machine.

    python -m benchmarks.bench_kraft_failover [--rounds 5] [--targets grete,kafka]

Both run with Kafka's defaults (controller.quorum.fetch.timeout.ms 2000, election timeout 1000 ms).
A Kafka voter waits out its fetch timeout before it stands for election; a grete voter whose fetch
to the leader ends with a reset connection, and whose probe of the leader's port is refused, stands
at once (pre-vote still protects a live leader). The killed voter is restarted and caught up
before the next round. Prints medians and writes ``benchmarks/results/kraft-failover-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from grete.protocol.messages import DescribeQuorumResponse
from tools.kraft_quorum import Quorum, start_quorum, wait_for

RESULTS = Path(__file__).resolve().parent / "results"


def new_leader(quorum: Quorum, old: DescribeQuorumResponse.PartitionData) -> DescribeQuorumResponse.PartitionData:
    def answered() -> DescribeQuorumResponse.PartitionData | None:
        for voter in quorum.live():
            view = quorum.describe(voter)
            if (view is not None and view.error_code == 0 and view.leader_id == voter.node_id
                    and view.leader_epoch > old.leader_epoch):
                return view
        return None
    found: DescribeQuorumResponse.PartitionData = wait_for(answered, 60, "a new leader", every=0.01)
    return found


def one_round(quorum: Quorum) -> float:
    before = quorum.caught_up(timeout=120)
    victim = quorum.voters[before.leader_id]
    started = time.monotonic()
    victim.kill()
    new_leader(quorum, before)
    seconds = time.monotonic() - started
    victim.start()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--targets", default="grete,kafka")
    args = parser.parse_args()
    targets = args.targets.split(",")
    samples: dict[str, list[float]] = {t: [] for t in targets}
    with tempfile.TemporaryDirectory(prefix="kraft-failover-") as scratch:
        quorums = {t: start_quorum([t, t, t], Path(scratch) / t) for t in targets}
        try:
            for number in range(args.rounds):
                for target in targets:
                    seconds = one_round(quorums[target])
                    samples[target].append(seconds)
                    print(f"round {number + 1}: {target} {seconds:.3f} s", flush=True)
        finally:
            for quorum in quorums.values():
                quorum.stop()
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rounds": args.rounds,
                              "seconds": samples,
                              "median_s": {t: statistics.median(v) for t, v in samples.items()}}
    for target, values in samples.items():
        print(f"{target}: median {statistics.median(values):.3f} s [{min(values):.3f}..{max(values):.3f}]")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"kraft-failover-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
