"""Start-up time of ``grete serve``: process start to the first answered ApiVersions request.

    python benchmarks/bench_startup.py [--runs 7] [--importtime] [--against OTHER_CHECKOUT]

Two cases: a fresh data dir, and a restart after a clean stop with ``__consumer_offsets`` (50
partitions) and one user topic on disk. Target: serving within 0.2 s. Per case it prints the median
[min..max] of the wall time and of the broker process's CPU time (user + system, read from /proc at
the first answer; on a loaded machine the wall time mostly measures the queue for a CPU, the CPU time
much less). With ``--importtime`` the broker runs under ``python -X importtime`` and the script also
prints the modules imported by the first answer (all / grete's) and their summed import time.
The broker runs from the current directory's checkout (``python -m grete.cli`` imports grete from
there); ``--against`` runs another checkout's broker in turn with it, run for run, so that both
see the same load. Each checkout's ``grete`` package is byte-compiled first, as ``pip install``
does: where ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it) every start would otherwise
compile ~220 modules from source, ~200 ms that an installed broker never pays. Writes nothing but
those ``__pycache__`` files.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

API_VERSIONS_V0 = struct.pack(">ihhih", 14, 18, 0, 1, 4) + b"bench"
TARGET_S = 0.2


@dataclass
class Sample:
    wall_s: float
    cpu_s: float
    modules: int = 0
    grete_modules: int = 0
    import_s: float = 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a live process (fields 14 and 15 of /proc/<pid>/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def imports_before_answer(trace: str) -> tuple[int, int, float]:
    """(modules, grete modules, summed self time in s) from ``-X importtime`` output."""
    rows = [line.split("|") for line in trace.splitlines() if line.startswith("import time:")]
    timed = [(int(self_us.split(":")[1]), name.strip()) for self_us, _cumulative, name in rows[1:]]
    return (len(timed), sum(1 for _, name in timed if name.startswith("grete")),
            sum(us for us, _ in timed) / 1e6)


def time_to_first_response(checkout: Path, data: Path, port: int, importtime: bool = False) -> Sample:
    python = [sys.executable, "-X", "importtime"] if importtime else [sys.executable]
    with tempfile.TemporaryFile("w+") as trace:
        started = time.perf_counter()
        proc = subprocess.Popen([*python, "-m", "grete.cli", "serve", "--log-level", "WARNING",
                                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                                 "--override", f"log.dirs={data}"], stderr=trace if importtime else None,
                                cwd=checkout)
        try:
            wall, cpu = answered(proc, port, started)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
        if not importtime:
            return Sample(wall, cpu)
        trace.seek(0)
        # The trace runs on to the stop; only what was imported by the first answer counts.
        return Sample(wall, cpu, *imports_before_answer(trace.read().split(STOP_MARK, 1)[0]))


# Imported by the api_versions handler on the first request: the trace up to and including it.
STOP_MARK = "grete.broker.handlers.api_versions\n"


def answered(proc: subprocess.Popen[bytes], port: int, started: float) -> tuple[float, float]:
    """Wall time to the first ApiVersions answer, and the broker's CPU time then."""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(API_VERSIONS_V0)
                if s.recv(4):
                    return time.perf_counter() - started, cpu_seconds(proc.pid)
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"grete serve exited with {proc.returncode}") from None
            time.sleep(0.002)


def prepare_restart_dir(checkout: Path, data: Path, port: int) -> None:
    """Create the offsets topic and a user topic, then stop cleanly."""
    from confluent_kafka import Consumer, Producer

    proc = subprocess.Popen([sys.executable, "-m", "grete.cli", "serve", "--log-level", "WARNING",
                             "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                             "--override", f"log.dirs={data}"], cwd=checkout)
    try:
        answered(proc, port, time.perf_counter())
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
        for i in range(1000):
            producer.produce("bench-startup", value=b"%d" % i)
        producer.flush(30)
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "bench"})
        consumer.subscribe(["bench-startup"])
        consumer.consume(10, 5)
        consumer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def spread(values: list[float], unit: float = 1000, fmt: str = ".0f") -> str:
    return (f"{statistics.median(values) * unit:{fmt}} "
            f"[{min(values) * unit:{fmt}}..{max(values) * unit:{fmt}}]")


def summary(samples: list[Sample], importtime: bool) -> str:
    wall = [s.wall_s for s in samples]
    met = "met" if statistics.median(wall) <= TARGET_S else "NOT met"
    line = (f"wall {spread(wall)} ms (target <= {TARGET_S * 1000:.0f} ms: {met}), "
            f"cpu {spread([s.cpu_s for s in samples])} ms")
    if importtime:
        line += (f", imports {spread([float(s.modules) for s in samples], 1)} "
                 f"(grete {spread([float(s.grete_modules) for s in samples], 1)}) "
                 f"in {spread([s.import_s for s in samples])} ms")
    return f"{line}; {len(samples)} runs"


def load_average() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--importtime", action="store_true", help="run the broker under -X importtime")
    parser.add_argument("--against", type=Path, help="another checkout, run in turn with this one")
    args = parser.parse_args()
    checkouts = [Path.cwd()] + ([args.against.resolve()] if args.against else [])
    for checkout in checkouts:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "grete")], check=True)
    port = free_port()
    print(load_average(), flush=True)
    fresh: dict[Path, list[Sample]] = {c: [] for c in checkouts}
    restart: dict[Path, list[Sample]] = {c: [] for c in checkouts}
    for _ in range(args.runs):
        for checkout in checkouts:
            with tempfile.TemporaryDirectory() as tmp:
                fresh[checkout].append(time_to_first_response(checkout, Path(tmp), port, args.importtime))
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {c: Path(tmp) / str(i) for i, c in enumerate(checkouts)}
        for checkout, data in dirs.items():
            prepare_restart_dir(checkout, data, port)
        for _ in range(args.runs):
            for checkout, data in dirs.items():
                restart[checkout].append(time_to_first_response(checkout, data, port, args.importtime))
    for checkout in checkouts:
        if len(checkouts) > 1:
            print(checkout)
        for name, samples in (("fresh data dir", fresh[checkout]), ("restart, 51 partitions", restart[checkout])):
            print(f"{name:24s} {summary(samples, args.importtime)}")
    print(load_average())


if __name__ == "__main__":
    main()
