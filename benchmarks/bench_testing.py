"""What grete.testing costs a test suite.

Measures:
  * cold start: a fresh interpreter importing grete.testing and starting + stopping its first
    broker (what the first test of a session pays), split into import and first start;
  * warm start+stop: a fresh broker per test after the first one (the grete_broker fixture),
    with the data dir where grete.testing puts it (tmpfs when available) and on disk;
  * time from broker start to a 3-member consumer group's first record, with confluent-kafka
    consumers (one thread each) on a 3-partition topic holding one record per partition: the
    first record seen by any member, and the moment all three members have their record;
  * the fault-injection seam's cost on a request when no fault is set (one attribute read) is
    not measurable end to end; the seam's cost while faults are installed is reported per request.

Run: python benchmarks/bench_testing.py [--repeat N]
Prints median [min..max] over the runs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

COLD = """
import time
t0 = time.perf_counter()
from grete.testing import broker, _wire
from grete.protocol.messages import MetadataRequest, MetadataResponse
t1 = time.perf_counter()
with broker() as b:
    t2 = time.perf_counter()
    _wire.call(b.host, b.port, MetadataRequest(topics=[]), MetadataResponse, 9)
    t3 = time.perf_counter()
t4 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t2, t4 - t3)
"""


def summary(values: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    vs = sorted(v * scale for v in values)
    return f"{statistics.median(vs):8.1f} {unit} [{vs[0]:.1f}..{vs[-1]:.1f}]"


def cold_start(repeat: int) -> None:
    imports, starts, firsts, stops = [], [], [], []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, check=True).stdout
        a, b, c, d = map(float, out.split())
        imports.append(a)
        starts.append(b)
        firsts.append(c)
        stops.append(d)
    print(f"cold: import grete.testing      {summary(imports)}")
    print(f"cold: first broker start        {summary(starts)}")
    print(f"cold: first request (Metadata)  {summary(firsts)}   (imports the request handlers)")
    print(f"cold: first broker stop         {summary(stops)}")


def warm_start_stop(repeat: int) -> None:
    import tempfile

    from grete.testing import broker, scratch_root

    with broker():
        pass
    for label, root in ((f"data on {scratch_root() or tempfile.gettempdir()}", None),
                        (f"data on {tempfile.gettempdir()} (disk)", tempfile.gettempdir())):
        totals, starts = [], []
        for _ in range(repeat):
            data = tempfile.mkdtemp(prefix="grete-bench-", dir=root) if root else None
            t0 = time.perf_counter()
            with broker(data_dir=data):
                t1 = time.perf_counter()
            t2 = time.perf_counter()
            if data:
                shutil.rmtree(data)
            totals.append(t2 - t0)
            starts.append(t1 - t0)
        print(f"warm: broker start              {summary(starts)}   {label}")
        print(f"warm: broker start + stop       {summary(totals)}   {label} (target <= 50 ms)")


def group_first_record(repeat: int) -> None:
    firsts, alls = [], []
    for run in range(repeat):
        first, last = _group_run(f"g{run}")
        firsts.append(first)
        alls.append(last)
    print(f"group: start -> first record    {summary(firsts)}   (target <= 500 ms)")
    print(f"group: start -> all 3 members   {summary(alls)}")


def _group_run(group: str) -> tuple[float, float]:
    """Seconds from broker start to the group's first record, and to all three members' records."""
    from confluent_kafka import Consumer, Producer

    from grete.testing import broker

    got: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()

    def member(bootstrap: str) -> None:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "heartbeat.interval.ms": 100})
        consumer.subscribe(["t"])
        mine = False
        while not stop.is_set():
            msg = consumer.poll(0.01)
            if msg is not None and msg.error() is None and not mine:
                mine = True
                with lock:
                    got.append(time.perf_counter())
        consumer.close()

    t0 = time.perf_counter()
    with broker(topics={"t": 3}) as b:
        producer = Producer({"bootstrap.servers": b.bootstrap_servers, "linger.ms": 0,
                             "log.connection.close": False})
        for p in range(3):
            producer.produce("t", f"r{p}".encode(), partition=p)
        producer.flush(10)
        threads = [threading.Thread(target=member, args=(b.bootstrap_servers,)) for _ in range(3)]
        for t in threads:
            t.start()
        _wait(lambda: len(got) >= 3, 20)
        stop.set()
        for t in threads:
            t.join(10)
        del producer
    return min(got) - t0, max(got) - t0


def seam_cost(repeat: int) -> None:
    """Round trips of a tiny Metadata request with and without an (unmatched) fault installed."""
    from grete.protocol.messages import MetadataRequest, MetadataResponse
    from grete.testing import _wire, broker

    def rounds(b: object, n: int = 300) -> float:
        request = MetadataRequest(topics=[], allow_auto_topic_creation=False)
        t0 = time.perf_counter()
        for _ in range(n):
            _wire.call(b.host, b.port, request, MetadataResponse, 9)  # type: ignore[attr-defined]
        return (time.perf_counter() - t0) / n

    with broker() as b:
        plain = [rounds(b) for _ in range(repeat)]
        with b.faults.fail("Produce", topic="nothing-sends-here"):
            faulted = [rounds(b) for _ in range(repeat)]
    print(f"seam: connect+Metadata, no faults       {summary(plain, 'us', 1e6)}")
    print(f"seam: connect+Metadata, fault installed {summary(faulted, 'us', 1e6)}")


def _wait(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark step timed out")
        time.sleep(0.002)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    cold_start(args.repeat)
    warm_start_stop(args.repeat * 5)
    group_first_record(args.repeat)
    seam_cost(args.repeat)


if __name__ == "__main__":
    main()
