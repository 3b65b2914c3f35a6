"""Child process for the SIGKILL test: append forever, report each flushed log end offset."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

from grete.protocol.records.batch import RecordBatch
from grete.protocol.records.record import Record, build_batch
from grete.storage import LogConfig, LogManager


def main() -> None:
    root = Path(sys.argv[1])
    mgr = LogManager([root], LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024))
    mgr.startup(cluster_id="crash", node_id=1)
    log = mgr.get_log("crash", 0) or mgr.create_log("crash", 0)
    rnd = random.Random()
    n = 0
    while True:
        base = log.log_end_offset
        count = rnd.randrange(1, 20)
        records = [Record(j, j, f"k{(base + j) % 50}".encode(), f"{base + j}|".encode() * rnd.randrange(1, 30))
                   for j in range(count)]
        log.append(RecordBatch(build_batch(records, compression=rnd.choice([0, 0, 1, 3]))), leader_epoch=0,
                   now_ms=int(time.time() * 1000))
        n += 1
        if n % 10 == 0:
            log.flush()
            if n % 30 == 0:
                mgr.checkpoint()
            sys.stdout.write(f"{log.log_end_offset}\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
