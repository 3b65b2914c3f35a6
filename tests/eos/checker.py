"""Exactly-once checker: consume-transform-produce under crashes, then an audit of what committed.

The run: an input topic of ``in:<p>:<seq>`` records; worker processes (tests/eos/worker.py, one
transactional.id each, disjoint input partitions) copy them to an output topic inside transactions,
aborting some on purpose. Meanwhile the driver SIGKILLs workers (restarting them with the same
transactional.id) and SIGKILLs the broker (restarting it on the same data directory).

The audit reads the output with a read_committed consumer and counts anomalies:

    aborted_reads     committed-visible records from a transaction that was aborted (or never committed)
    duplicates        input records whose transform is visible more than once
    lost              input records whose transform is not visible at all
    lost_txns         transactions whose commit call returned but whose records are not visible
    reorders          per output partition, a record whose input seq is below its predecessor's
    offset_mismatches visible transactions whose records do not exactly cover the input range between
                      the group offset the previous visible transaction committed and the one this
                      transaction committed; plus partitions whose final group offset is not the input end

One exception, and only with the broker's own evidence (CrashableBroker.dropped_markers(): Apache
Kafka logs it, grete never does): a transaction the broker completed without writing its marker to
a partition stays open there, and the producer's next commit on that partition makes it visible.
Its records are taken out before the audit and counted as ``excused`` (see README.md).

    python -m tests.eos.checker [--target kafka-4] [--seed N] [--worker-kills N] [--broker-kill-at 5,12]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.eos.brokers import REPO, CrashableBroker, DroppedMarker, start_broker
from tools.kafka_admin import create_topic

STALL_SECONDS = 15.0  # longer than any one client call in the worker (OP_TIMEOUT 10 s)


@dataclass
class Plan:
    partitions: int = 4
    per_partition: int = 250
    workers: int = 2
    worker_kills: int = 6
    worker_kill_gap: tuple[float, float] = (1.0, 2.5)  # seconds between worker kills
    broker_kill_at: tuple[float, ...] = (5.0,)  # seconds into the run
    deadline: float = 110.0  # the whole crash phase, seconds


@dataclass
class Chaos:
    worker_kills: int = 0
    kills_mid_txn: int = 0
    broker_kills: int = 0
    crash_exits: int = 0  # workers that exited non-zero on their own (e.g. the broker was down)
    stalls: int = 0  # workers killed because their journal did not move for STALL_SECONDS
    seconds: float = 0.0


@dataclass
class Report:
    anomalies: dict[str, int]
    chaos: Chaos
    committed_txns: int
    aborted_txns: int
    aborted_records_in_log: int
    visible: int
    expected: int
    excused: int = 0  # visible records of transactions whose marker the broker admits it dropped
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return json.dumps({"anomalies": self.anomalies, "excused": self.excused, "chaos": self.chaos.__dict__,
                           "committed_txns": self.committed_txns, "aborted_txns": self.aborted_txns,
                           "aborted_records_in_log": self.aborted_records_in_log,
                           "visible": self.visible, "expected": self.expected,
                           "notes": self.notes[:20]}, indent=1)


# --- the run ---------------------------------------------------------------------------------

class WorkerSlot:
    """One transactional.id and its input partitions; restarted as a new process after every crash."""

    def __init__(self, k: int, parts: list[int], args: dict[str, str], workdir: Path, seed: int) -> None:
        self.k = k
        self.parts = parts
        self.args = args
        self.journal = workdir / f"journal-{k}.jsonl"
        self.stderr = workdir / f"worker-{k}.log"
        self.seed = seed
        self.proc: subprocess.Popen[bytes] | None = None
        self.done = False
        self.starts = 0
        self.progress = (0, time.monotonic())  # (journal size, when it last changed)

    def spawn(self) -> None:
        self.starts += 1
        self.progress = (self.journal.stat().st_size if self.journal.exists() else 0, time.monotonic())
        cmd = [sys.executable, "-m", "tests.eos.worker", self.args["bootstrap"], self.args["input"],
               self.args["output"], self.args["group"], f"{self.args['group']}-txn-{self.k}",
               ",".join(map(str, self.parts)), str(self.journal), str(self.seed * 1000 + self.starts)]
        with open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                                         start_new_session=True)

    def mid_transaction(self) -> bool:
        """The journal's last line opens a transaction or announces its outcome, but no end yet."""
        lines = self.journal.read_text().splitlines() if self.journal.exists() else []
        if not lines:
            return False
        last = json.loads(lines[-1])
        return "begin" in last or "commit" in last or "abort" in last

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stalled(self, now: float) -> bool:
        """Alive, yet the journal has not grown for STALL_SECONDS (longer than any client timeout)."""
        size = self.journal.stat().st_size if self.journal.exists() else 0
        if size != self.progress[0]:
            self.progress = (size, now)
        return self.check() is None and now - self.progress[1] > STALL_SECONDS

    def dump_and_kill(self) -> None:
        """Have the worker print its Python stacks into its log (faulthandler), then kill it."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGUSR1)
            time.sleep(0.5)
        self.kill()

    def check(self) -> int | None:
        """None while running; the exit code once it ended."""
        return None if self.proc is None else self.proc.poll()


def produce_input(bootstrap: str, topic: str, plan: Plan) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for part in range(plan.partitions):
        for seq in range(plan.per_partition):
            p.produce(topic, value=f"in:{part}:{seq}".encode(), partition=part)
            if seq % 200 == 0:
                p.poll(0)
    assert p.flush(60) == 0, "input not fully delivered"


def run_chaos(broker: CrashableBroker, names: dict[str, str], plan: Plan, workdir: Path,
              rng: random.Random) -> tuple[Chaos, list[WorkerSlot]]:
    chaos = Chaos()
    slots = [WorkerSlot(k, [p for p in range(plan.partitions) if p % plan.workers == k],
                        names, workdir, rng.randrange(1 << 20)) for k in range(plan.workers)]
    t0 = time.monotonic()
    for s in slots:
        s.spawn()
    next_kill = t0 + rng.uniform(*plan.worker_kill_gap)
    broker_kills = list(plan.broker_kill_at)
    try:
        while not all(s.done for s in slots):
            now = time.monotonic()
            if now - t0 > plan.deadline:
                raise TimeoutError(f"workers not done after {plan.deadline}s; chaos so far {chaos}; "
                                   f"worker logs in {workdir}")
            for s in slots:
                rc = s.check()
                if rc == 0:
                    s.done = True
                elif rc is not None:
                    chaos.crash_exits += 1
                    s.spawn()
            for s in slots:
                if not s.done and s.stalled(now):
                    chaos.stalls += 1
                    s.dump_and_kill()
                    s.spawn()
            live = [s for s in slots if not s.done and s.check() is None]
            if now >= next_kill and chaos.worker_kills < plan.worker_kills and live:
                victim = rng.choice(live)
                chaos.kills_mid_txn += victim.mid_transaction()
                victim.kill()
                chaos.worker_kills += 1
                victim.spawn()
                next_kill = now + rng.uniform(*plan.worker_kill_gap)
            if broker_kills and now - t0 >= broker_kills[0]:
                broker_kills.pop(0)
                broker.kill()
                chaos.broker_kills += 1
                time.sleep(rng.uniform(0.0, 1.0))
                broker.restart()
            time.sleep(0.05)
    finally:
        for s in slots:
            s.kill()
        chaos.seconds = time.monotonic() - t0
    return chaos, slots


# --- the audit -------------------------------------------------------------------------------

@dataclass
class Journal:
    commit_offsets: dict[str, dict[int, int]] = field(default_factory=dict)  # tag -> input offsets
    committed: set[str] = field(default_factory=set)  # commit call returned
    aborted: set[str] = field(default_factory=set)  # abort decided on purpose
    slot: dict[str, int] = field(default_factory=dict)  # tag -> worker slot (its transactional.id)
    began: dict[str, float] = field(default_factory=dict)  # tag -> wall-clock time of its "begin"


def read_journals(slots: list[WorkerSlot]) -> Journal:
    j = Journal()
    for s in slots:
        for line in s.journal.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("begin"):
                j.slot[entry["tag"]] = s.k
                j.began[entry["tag"]] = float(entry.get("t", 0.0))
            if "offsets" in entry:
                j.commit_offsets[entry["tag"]] = {int(p): int(o) for p, o in entry["offsets"].items()}
            if entry.get("committed"):
                j.committed.add(entry["tag"])
            if entry.get("abort"):
                j.aborted.add(entry["tag"])
    return j


def wait_settled(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[str]:
    """Wait until every partition's last stable offset reaches its high watermark (no transaction
    open: the workers are done, and a commit returns before its markers are written). Returns a note
    per partition that stays unsettled: an open transaction at the end hides records from the audit,
    which then shows up as ``lost``."""
    from confluent_kafka import Consumer, TopicPartition

    def ends(isolation: str) -> dict[int, int]:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"settle-{os.getpid()}",
                      "isolation.level": isolation})
        try:  # with read_committed, ListOffsets(latest) answers the last stable offset
            return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1]
                    for p in range(partitions)}
        finally:
            c.close()

    deadline = time.monotonic() + timeout
    while True:
        stable, high = ends("read_committed"), ends("read_uncommitted")
        if stable == high or time.monotonic() > deadline:
            return [f"p{p}: last stable offset {stable[p]} < high watermark {high[p]} after {timeout:.0f}s"
                    for p in range(partitions) if stable[p] != high[p]]
        time.sleep(0.5)


def read_output(bootstrap: str, topic: str, partitions: int, isolation: str) -> dict[int, list[tuple[int, str]]]:
    """Every record of ``topic`` readable at ``isolation``, as (input seq, transaction tag) per partition."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"audit-{os.getpid()}-{time.time_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    out: dict[int, list[tuple[int, str]]] = {p: [] for p in range(partitions)}
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_eof: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_eof) < partitions and time.monotonic() < deadline:
            for m in c.consume(num_messages=500, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_eof.add(m.partition())
                        continue
                    raise RuntimeError(f"audit consumer: {err}")
                at_eof.discard(m.partition())
                _out, _p, seq, tag = m.value().decode().split(":")
                out[m.partition()].append((int(seq), tag))
        if len(at_eof) < partitions:
            raise TimeoutError(f"audit reached the end of only {sorted(at_eof)} of {partitions} partitions")
    finally:
        c.close()
    return out


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


def audit(visible: dict[int, list[tuple[int, str]]], journal: Journal, final_offsets: dict[int, int],
          plan: Plan) -> tuple[dict[str, int], list[str]]:
    notes: list[str] = []
    counts: Counter[str] = Counter({k: 0 for k in ("aborted_reads", "duplicates", "lost", "lost_txns",
                                                   "reorders", "offset_mismatches")})
    visible_tags: set[str] = set()
    for p, records in visible.items():
        seqs = Counter(seq for seq, _tag in records)
        counts["duplicates"] += sum(n - 1 for n in seqs.values())
        lost = [s for s in range(plan.per_partition) if s not in seqs]
        counts["lost"] += len(lost)
        if lost:
            notes.append(f"p{p}: lost seqs {lost[:10]}")
        for (prev, _t1), (seq, tag) in zip(records, records[1:], strict=False):
            if seq < prev:
                counts["reorders"] += 1
                notes.append(f"p{p}: seq {seq} ({tag}) after {prev}")
        for seq, tag in records:
            visible_tags.add(tag)
            if tag in journal.aborted or tag not in journal.commit_offsets:
                counts["aborted_reads"] += 1
                notes.append(f"p{p}: seq {seq} visible from aborted/uncommitted transaction {tag}")
        counts["offset_mismatches"] += check_offsets(p, records, journal, notes)
        if final_offsets.get(p) != plan.per_partition:
            counts["offset_mismatches"] += 1
            notes.append(f"p{p}: final group offset {final_offsets.get(p)} != input end {plan.per_partition}")
    for tag in sorted(journal.committed - visible_tags):
        counts["lost_txns"] += 1
        notes.append(f"transaction {tag} committed but none of its records is visible")
    return dict(counts), notes


def excuse_dropped_markers(visible: dict[int, list[tuple[int, str]]], journal: Journal,
                           dropped: list[DroppedMarker], txn_ids: dict[str, int], output: str,
                           ) -> tuple[dict[int, list[tuple[int, str]]], int, list[str]]:
    """Take out of ``visible`` the records of each transaction the broker says it completed without
    a marker on that partition; return what is left, how many records were taken, and notes.

    Only the transaction that was open at the time (the slot's last one begun before the admission)
    is excused, only on the partition named, and only if it never reached its commit call: that
    is exactly the set of records the missing abort marker should have hidden."""
    excused: set[tuple[int, str]] = set()  # (partition, tag)
    notes: list[str] = []
    for d in dropped:
        k = txn_ids.get(d.txn_id)
        if k is None or d.topic != output:
            continue
        open_then = [t for t, slot in journal.slot.items() if slot == k and journal.began[t] <= d.at]
        if not open_then:
            continue
        tag = max(open_then, key=lambda t: journal.began[t])
        if tag not in journal.commit_offsets and (d.partition, tag) not in excused:  # Kafka retries: once
            excused.add((d.partition, tag))
            shown = sum(t == tag for _seq, t in visible.get(d.partition, []))
            notes.append(f"p{d.partition}: broker dropped the marker of {d.txn_id}'s transaction {tag} "
                         f"({shown} of its records visible)")
    kept = {p: [(seq, tag) for seq, tag in records if (p, tag) not in excused] for p, records in visible.items()}
    n = sum(len(r) for r in visible.values()) - sum(len(r) for r in kept.values())
    return kept, n, notes


def check_offsets(p: int, records: list[tuple[int, str]], journal: Journal, notes: list[str]) -> int:
    """Visible transactions on p, in log order, must each write exactly the input range its offset
    commit consumed: [offset committed by the previous visible transaction, its own offset)."""
    by_tag: dict[str, list[int]] = defaultdict(list)
    order: list[str] = []
    for seq, tag in records:
        if tag not in by_tag:
            order.append(tag)
        by_tag[tag].append(seq)
    bad = 0
    start = 0
    for tag in order:
        committed = journal.commit_offsets.get(tag, {}).get(p)
        if committed is None:
            bad += 1
            notes.append(f"p{p}: transaction {tag} wrote output but committed no offset for p{p}")
            continue
        if by_tag[tag] != list(range(start, committed)):
            bad += 1
            notes.append(f"p{p}: transaction {tag} wrote {by_tag[tag][:5]}.. for offsets [{start}, {committed})")
        start = committed
    return bad


def check(broker: CrashableBroker, plan: Plan | None = None, seed: int | None = None,
          workdir: Path | None = None) -> Report:
    """One full run on ``broker``: set up, crash things, audit. Raises if the run cannot finish."""
    plan = plan or Plan()
    seed = seed if seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    workdir = workdir or Path(tempfile.mkdtemp(prefix="eos-"))
    suffix = f"{seed:x}-{time.time_ns() % 1_000_000:x}"
    names = {"bootstrap": broker.bootstrap, "input": f"eos-in-{suffix}", "output": f"eos-out-{suffix}",
             "group": f"eos-{suffix}"}
    create_topic(broker.bootstrap, names["input"], plan.partitions)
    create_topic(broker.bootstrap, names["output"], plan.partitions)
    produce_input(broker.bootstrap, names["input"], plan)
    chaos, slots = run_chaos(broker, names, plan, workdir, rng)
    journal = read_journals(slots)
    unsettled = wait_settled(broker.bootstrap, names["output"], plan.partitions)
    visible = read_output(broker.bootstrap, names["output"], plan.partitions, "read_committed")
    everything = read_output(broker.bootstrap, names["output"], plan.partitions, "read_uncommitted")
    offsets = group_offsets(broker.bootstrap, names["group"], names["input"], plan.partitions)
    n_visible = sum(len(r) for r in visible.values())
    txn_ids = {f"{names['group']}-txn-{s.k}": s.k for s in slots}
    visible, excused, excuse_notes = excuse_dropped_markers(visible, journal, broker.dropped_markers(),
                                                            txn_ids, names["output"])
    anomalies, notes = audit(visible, journal, offsets, plan)
    return Report(anomalies=anomalies, chaos=chaos, committed_txns=len(journal.committed),
                  aborted_txns=len(journal.aborted),
                  aborted_records_in_log=sum(len(r) for r in everything.values()) - n_visible,
                  visible=n_visible - excused, expected=plan.partitions * plan.per_partition,
                  excused=excused, notes=[f"seed={seed}", f"workdir={workdir}", *unsettled, *excuse_notes, *notes])


def _main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.eos.checker")
    ap.add_argument("--target", default=None, help="grete (default: $GRETE_TEST_TARGET), kafka-4, kafka-3.9")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--worker-kills", type=int, default=Plan.worker_kills)
    ap.add_argument("--broker-kill-at", default="5,12",
                    help="seconds into the run at which to SIGKILL the broker, comma-separated ('' for none)")
    a = ap.parse_args(argv)
    plan = Plan(worker_kills=a.worker_kills,
                broker_kill_at=tuple(float(x) for x in a.broker_kill_at.split(",") if x.strip()))
    broker = start_broker(a.target)
    try:
        report = check(broker, plan, seed=a.seed)
    finally:
        broker.stop()
    print(report.summary())
    return 1 if any(report.anomalies.values()) else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
