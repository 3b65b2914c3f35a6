"""Storage benchmarks: append throughput, offset lookup latency, compaction rate, recovery time.

    python benchmarks/bench_storage.py [--dir /path] [--big] [--runs 5] [--json out.json]

* append: 1 MB batches through Log.append vs a raw os.write loop of the same bytes (no fsync,
  page cache), same amount of data, the two taking turns every 32 MB. Target: Log >= 90% of raw.
* lookup: Log.read latency (index binary search + header scan + slice) near the start, middle
  and end of a 1 GB log of 4 KB batches (20 GB with --big).
* compaction: MB/s of one compaction pass over a log of 1 KB records with 10% distinct keys.
* recovery: Log.open after a crash with the whole 1 GB log past the recovery point (CRC check of
  every batch, index rebuild).

Reports medians [min..max] over --runs repetitions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from grete.protocol.records.batch import RecordBatch  # noqa: E402
from grete.protocol.records.record import Record, build_batch  # noqa: E402
from grete.storage import Log, LogConfig  # noqa: E402
from grete.storage.cleaner import clean_log  # noqa: E402

MB = 1 << 20


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}..{max(values):.2f}]"


def one_mb_batch() -> bytearray:
    value = os.urandom(1000)
    records = [Record(i, 0, None, value) for i in range(1040)]
    return build_batch(records, base_timestamp=int(time.time() * 1000))


def bench_append(root: Path, total_mb: int, chunk: int = 32) -> tuple[float, float]:
    """Raw and Log writers take turns every ``chunk`` batches, so both meet the same page-cache
    and write-back conditions (this VM's disk throughput swings a lot)."""
    batch = one_mb_batch()
    n = total_mb * MB // len(batch)
    raw_dir = root / "raw-0"
    raw_dir.mkdir()
    fd = os.open(raw_dir / "00000000000000000000.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    log = Log.open(root / "bench-0", LogConfig(), clean_shutdown=True)
    view = RecordBatch(batch)
    now = int(time.time() * 1000)
    raw_s = log_s = 0.0
    for start in range(0, n, chunk):
        count = min(chunk, n - start)
        t0 = time.perf_counter()
        for _ in range(count):
            os.write(fd, batch)
        t1 = time.perf_counter()
        for _ in range(count):
            log.append(view, leader_epoch=0, now_ms=now)
        t2 = time.perf_counter()
        raw_s += t1 - t0
        log_s += t2 - t1
    os.close(fd)
    log.close()
    shutil.rmtree(raw_dir)
    shutil.rmtree(root / "bench-0")
    size_mb = n * len(batch) / MB
    return size_mb / raw_s, size_mb / log_s


def build_log(directory: Path, total_mb: int, batch_kb: int = 4) -> Log:
    value = os.urandom(batch_kb * 1024 - 100)
    batch = build_batch([Record(0, 0, None, value)], base_timestamp=int(time.time() * 1000))
    view = RecordBatch(batch)
    log = Log.open(directory, LogConfig(), clean_shutdown=True)
    now = int(time.time() * 1000)
    for _ in range(total_mb * MB // len(batch)):
        log.append(view, leader_epoch=0, now_ms=now)
    return log


def bench_lookup(log: Log, reads: int = 2000) -> dict[str, float]:
    end = log.log_end_offset
    out = {}
    for name, at in (("start", 0.0001), ("middle", 0.5), ("end", 0.9999)):
        base = int(end * at)
        t0 = time.perf_counter()
        for i in range(reads):
            log.read(min(base + (i % 50), end - 1), MB)
        out[name] = (time.perf_counter() - t0) / reads * 1e6
    return out


def bench_compaction(root: Path, total_mb: int) -> float:
    log = Log.open(root / "compact-0", LogConfig(cleanup_policy="compact", segment_bytes=64 * MB,
                                                 min_cleanable_dirty_ratio=0.0), clean_shutdown=True)
    n_records = total_mb * MB // 1100
    keys = max(1, n_records // 10)
    now = int(time.time() * 1000)
    per_batch = 16
    for start in range(0, n_records, per_batch):
        records = [Record(i, 0, f"key-{(start + i) % keys}".encode(), os.urandom(1000)) for i in range(per_batch)]
        log.append(RecordBatch(build_batch(records, base_timestamp=now)), leader_epoch=0, now_ms=now)
    log.roll()
    size = sum(s.size for s in log.segments[:-1])
    t0 = time.perf_counter()
    done = clean_log(log, 0, now, force=True)
    took = time.perf_counter() - t0
    assert done is not None
    log.close()
    shutil.rmtree(root / "compact-0")
    return size / MB / took


def bench_recovery(directory: Path) -> float:
    t0 = time.perf_counter()
    log = Log.open(directory, LogConfig(), clean_shutdown=False, recovery_point=0)
    took = time.perf_counter() - t0
    log.close()
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--big", action="store_true", help="also a 20 GB log for lookups")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--append-mb", type=int, default=1024)
    parser.add_argument("--compact-mb", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="grete-bench-", dir=args.dir))
    results: dict[str, object] = {}
    try:
        raws, logs, ratios = [], [], []
        for _ in range(args.runs):
            raw, lg = bench_append(root, args.append_mb)
            raws.append(raw)
            logs.append(lg)
            ratios.append(lg / raw * 100)
        print(f"append 1 MB batches, {args.append_mb} MB: raw os.write {summary(raws)} MB/s, "
              f"Log.append {summary(logs)} MB/s, ratio {summary(ratios)} %")
        results["append"] = {"raw_mb_s": raws, "log_mb_s": logs, "ratio_pct": ratios}

        sizes = [1024] + ([20 * 1024] if args.big else [])
        for size_mb in sizes:
            log = build_log(root / f"lookup{size_mb}-0", size_mb)
            per: dict[str, list[float]] = {"start": [], "middle": [], "end": []}
            for _ in range(args.runs):
                for k, v in bench_lookup(log).items():
                    per[k].append(v)
            print(f"lookup in a {size_mb} MB log ({log.log_end_offset} batches of 4 KB): " +
                  ", ".join(f"{k} {summary(v)} us" for k, v in per.items()))
            results[f"lookup_{size_mb}mb_us"] = per
            log.close()
            if size_mb == 1024:
                rec = [bench_recovery(root / f"lookup{size_mb}-0") for _ in range(args.runs)]
                print(f"recovery of a 1 GB unflushed log: {summary(rec)} s")
                results["recovery_1gb_s"] = rec
            shutil.rmtree(root / f"lookup{size_mb}-0")

        comp = [bench_compaction(root, args.compact_mb) for _ in range(max(1, args.runs // 2))]
        print(f"compaction of {args.compact_mb} MB (1 KB records, 10% distinct keys): {summary(comp)} MB/s")
        results["compaction_mb_s"] = comp
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
