"""Rounds of workload + fault + heal + catch-up read + check, against grete (ZooKeeper or KRaft),
Kafka 3.9.2 (ZooKeeper) or Kafka 4.3.1 (KRaft).

    python -m tests.jepsen.run --rounds 100 --seed 1 [--target grete|kafka-3.9|grete-kraft|kafka-4.3]
                               [--unclean] [--snapshot-often] [--faults kill-leader,pause-leader,...]
                               [--out result.json]

The seed fixes the sequence of faults and their parameters (victims are chosen by role, e.g. "the
leader of p1", so the broker ids depend on the cluster's state). One cluster serves every round;
each round writes to its own two topics (``jepsen-<n>``, idempotent; ``jepsen-tx-<n>``,
transactional), both 3 partitions, RF 3, min.insync.replicas=2.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from tests.jepsen import checker, firewall, logfiles, nemesis
from tests.jepsen.clusters import KRAFT_TARGETS, TARGETS, open_cluster
from tests.jepsen.views import KraftView, View, ZkView
from tests.jepsen.workload import IdempotentWriter, TransactionalWriter, read_topic

PARTITIONS = 3
ALL_FAULTS = {**nemesis.FAULTS, **nemesis.FIREWALL_FAULTS, **nemesis.EXTRA_FAULTS, **nemesis.NETWORK_FAULTS,
              **nemesis.KRAFT_FAULTS}
WRITERS = 3
WARMUP_S = 2.0
RECOVERY_S = 4.0


def create_topics(cluster: Any, names: Sequence[str], config: dict[str, str], timeout: float = 60) -> None:
    """Create the round's topics. A broker that has just re-registered in ZooKeeper is not yet in the
    controller's live brokers (it learns of it through its own event queue, as Kafka's does), so
    INVALID_REPLICATION_FACTOR is retried until the cluster view has every broker again."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        futures = admin.create_topics([NewTopic(n, PARTITIONS, 3, config=config) for n in pending],
                                      operation_timeout=30)
        retry = []
        for name in pending:
            try:
                futures[name].result(60)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() != KafkaError.INVALID_REPLICATION_FACTOR or time.monotonic() > deadline:
                    raise
                retry.append(name)
        pending = retry
        if pending:
            time.sleep(0.5)


def replica_logs(cluster: Any, topic: str) -> dict[int, dict[int, checker.Read]]:
    out: dict[int, dict[int, checker.Read]] = {}
    for broker_id, broker in cluster.brokers.items():
        out[broker_id] = {}
        for p in range(PARTITIONS):
            directory = Path(broker.data_dir) / f"{topic}-{p}"
            if directory.is_dir():
                out[broker_id][p] = logfiles.read_partition_dir(directory)[0]
    return out


def run_round(cluster: Any, view: View, number: int, fault: str, rng: random.Random, unclean: bool,
              say: Callable[[str], None]) -> checker.RoundResult:
    result = checker.RoundResult(number, fault)
    log = nemesis.Events()
    topic, txn_topic = f"jepsen-{number}", f"jepsen-tx-{number}"
    config = {"min.insync.replicas": "2", "unclean.leader.election.enable": "true" if unclean else "false"}
    nemesis.registered(view, sorted(cluster.brokers), 60, log)  # the round's topics need every broker
    create_topics(cluster, [topic, txn_topic], config)
    nemesis.full_isr(view, [topic, txn_topic], 60, log)
    bootstrap = cluster.bootstrap_servers
    writes: dict[str, checker.Write] = {}
    ack_times: list[float] = []
    txns: list[checker.Txn] = []
    stop = threading.Event()
    writers = [IdempotentWriter(bootstrap, topic, PARTITIONS, f"w{i}", writes, ack_times, stop)
               for i in range(WRITERS)]
    txn_writer = TransactionalWriter(bootstrap, txn_topic, PARTITIONS, f"jepsen-tx-{number}", txns, stop,
                                     random.Random(rng.random()))
    for thread in [*writers, txn_writer]:
        thread.start()
    time.sleep(WARMUP_S)
    fault_start = time.monotonic()
    try:
        ALL_FAULTS[fault](cluster, view, topic, rng, log)
    except nemesis.Finding as exc:
        log(f"finding: {exc}")
        result.error = f"fault: {exc}"
    except Exception as exc:
        log(f"fault raised {exc!r}")
        result.notes.append(traceback.format_exc(limit=3))
    time.sleep(RECOVERY_S)
    writes_end = time.monotonic()
    stop.set()
    for thread in [*writers, txn_writer]:
        thread.join(120)
    result.unavailable_s = round(checker.unavailable(ack_times, fault_start, writes_end), 2)
    healed = nemesis.heal(cluster, view, [topic, txn_topic], log)
    if not healed:
        result.notes.append("heal: ISR not full")
    reads, ends, problems = read_topic(bootstrap, topic, PARTITIONS, "read_uncommitted")
    committed, _, problems_c = read_topic(bootstrap, txn_topic, PARTITIONS, "read_committed")
    uncommitted, txn_ends, problems_u = read_topic(bootstrap, txn_topic, PARTITIONS, "read_uncommitted")
    result.notes += problems + problems_c + problems_u
    checker.check_writes(result, writes.values(), reads)
    checker.check_txns(result, txns, committed, uncommitted)
    # The replicas' files: once the ISR is full and writes have stopped, every replica must hold
    # the same record at each offset below the high watermark.
    if healed:
        time.sleep(1.0)
        checker.check_replicas(result, topic, replica_logs(cluster, topic), ends)
        checker.check_replicas(result, txn_topic, replica_logs(cluster, txn_topic), txn_ends)
    result.notes += log.lines
    result.notes += duplicate_evidence(cluster, topic, result.duplicates)
    result.notes += [f"writer fatal: {f}" for w in writers for f in w.fatal]
    failures = Counter(w.error for w in writes.values() if w.status == "fail")
    result.notes += [f"failed writes: {dict(failures)}"] if failures else []
    result.notes += [f"txn: {e}" for e in txn_writer.errors[:10]]
    return result


def duplicate_evidence(cluster: Any, topic: str, found: Sequence[str]) -> list[str]:
    """The batches holding each duplicated value, from one replica's files (producer id, epoch and
    sequence tell whether the broker should have dropped the second copy)."""
    out = []
    broker = cluster.brokers[min(cluster.brokers)]
    for line in found[:5]:
        value, _, where = line.partition(" x")
        partitions = sorted({at.split("@")[0].lstrip("(p") for at in where.split()[1:]})
        for p in partitions:
            directory = Path(broker.data_dir) / f"{topic}-{p}"
            out += [f"duplicate {value} on broker {min(cluster.brokers)}: {b}"
                    for b in logfiles.batches_with(directory, {value})]
    return out


HEADER = (f"{'round':>5} {'fault':<18} {'acked':>6} {'fail':>5} {'unkn':>5} {'txn c/a/u':>11} {'lost':>5} "
          f"{'dup':>4} {'reord':>5} {'2val':>4} {'abrtR':>5} {'lostC':>5} {'part':>4} {'unavail':>7}")


def row(r: checker.RoundResult) -> str:
    txn = f"{r.txns_committed}/{r.txns_aborted}/{r.txns_unknown}"
    return (f"{r.round:>5} {r.fault:<18} {r.acked:>6} {r.failed:>5} {r.unknown:>5} {txn:>11} {len(r.lost):>5} "
            f"{len(r.duplicates):>4} {len(r.reorders):>5} {len(r.two_values):>4} {len(r.aborted_reads):>5} "
            f"{len(r.lost_committed):>5} {len(r.partial_txns):>4} {r.unavailable_s:>6.1f}s")


def summarize(results: Sequence[checker.RoundResult]) -> dict[str, Any]:
    totals: dict[str, int] = {name: sum(len(getattr(r, name)) for r in results) for name in checker.RoundResult.ANOMALIES}
    per_fault: dict[str, dict[str, Any]] = {}
    for r in results:
        entry = per_fault.setdefault(r.fault, {"rounds": 0, "unavailable_max_s": 0.0, "unavailable_sum_s": 0.0})
        entry["rounds"] += 1
        entry["unavailable_max_s"] = max(entry["unavailable_max_s"], r.unavailable_s)
        entry["unavailable_sum_s"] += r.unavailable_s
    for entry in per_fault.values():
        entry["unavailable_mean_s"] = round(entry.pop("unavailable_sum_s") / entry["rounds"], 2)
    return {"rounds": len(results), "errors": sum(1 for r in results if r.error), "acked": sum(r.acked for r in results),
            "txns_committed": sum(r.txns_committed for r in results),
            "txns_aborted": sum(r.txns_aborted for r in results), "anomalies": totals, "per_fault": per_fault}


# Faults left out of a target's default mix (still run with --faults). A Kafka 4.3.1 KRaft broker
# whose metadata log lives in its log dir opens that log before its LogManager takes the dir's
# .lock: a second process replays and recovers the live broker's __cluster_metadata-0, which then
# fails (CorruptRecordException in its Raft IO thread), and the second process registers in its
# place (README "Anomalies found").
NOT_IN_MIX = {"kafka-4.3": {"second-process"}}


def default_faults(target: str, netns: bool) -> list[str]:
    """Every fault of ``target`` this machine can inflict: iptables ones when usable, partitions
    between brokers with ``netns``."""
    kraft = target in KRAFT_TARGETS
    faults = ([*(nemesis.KRAFT_FAULTS if kraft else nemesis.FAULTS)]
              + ([*nemesis.FIREWALL_FAULTS] if firewall.available() is None else [])
              + ([*(nemesis.KRAFT_NETWORK_FAULTS if kraft else nemesis.NETWORK_FAULTS)] if netns else []))
    return [f for f in faults if f not in NOT_IN_MIX.get(target, ())]


def run(target: str = "grete", rounds: int = 3, seed: int = 1, unclean: bool = False,
        faults: Sequence[str] | None = None, out: str | Path | None = None, keep: bool = False,
        say: Callable[[str], None] = print, netns: bool = False, snapshot_often: bool = False) -> dict[str, Any]:
    """Run ``rounds`` rounds; returns (and writes to ``out``) the JSON result. ``netns``: each broker
    in its own network namespace, which the partition faults need (and then join the default mix).
    ``snapshot_often`` (KRaft): every node snapshots its metadata at each commit (clusters.SNAPSHOT_OFTEN)."""
    rng = random.Random(seed)
    chosen = list(faults or default_faults(target, netns))
    netns = netns or any(f in nemesis.NETWORK_FAULTS for f in chosen)
    say(f"jepsen: target {target}, seed {seed}, {rounds} rounds, faults {chosen}, unclean={unclean}, "
        f"netns={netns}" + (", snapshot-often" if snapshot_often else ""))
    overrides = {"unclean.leader.election.enable": "true" if unclean else "false"}
    if "request-memory-flood" in chosen:
        overrides.update(nemesis.REQUEST_POOL_OVERRIDES)
    results: list[checker.RoundResult] = []
    t0 = time.monotonic()
    document: dict[str, Any] = {}
    with open_cluster(target, overrides=overrides, keep=keep, namespaces=netns,
                      snapshot_often=snapshot_often) as cluster:
        say(f"cluster up in {time.monotonic() - t0:.0f}s: {cluster.bootstrap_servers} (data in {cluster.directory})")
        view: View = ZkView(cluster.zookeeper.connect) if cluster.zookeeper is not None else KraftView(cluster)
        say(HEADER)
        try:
            for number in range(1, rounds + 1):
                fault = rng.choice(chosen)
                round_rng = random.Random(rng.random())
                started = time.monotonic()
                try:
                    result = run_round(cluster, view, number, fault, round_rng, unclean, say)
                except Exception as exc:  # recorded; the next round starts from a healed cluster
                    result = checker.RoundResult(number, fault, error=repr(exc), notes=[traceback.format_exc()])
                    say(f"round {number} ({fault}) failed: {exc!r}")
                    nemesis.heal(cluster, view, [], nemesis.Events())
                result.notes.insert(0, f"round took {time.monotonic() - started:.0f}s")
                results.append(result)
                say(row(result) + ("  <-- " + ", ".join(f"{k} {v}" for k, v in result.anomalies().items())
                                   if result.anomalies() else "") + (f"  <-- {result.error}" if result.error else ""))
                document = {"target": target, "seed": seed, "unclean": unclean, "snapshot_often": snapshot_often,
                            "faults": chosen,
                            "seconds": round(time.monotonic() - t0), "summary": summarize(results),
                            "rounds": [r.as_json() for r in results]}
                if out is not None:
                    Path(out).parent.mkdir(parents=True, exist_ok=True)
                    Path(out).write_text(json.dumps(document, indent=1))
        finally:
            view.close()
    summary = summarize(results)
    say(f"total: {summary['rounds']} rounds, {summary['acked']} acked writes, "
        f"{summary['txns_committed']} committed / {summary['txns_aborted']} aborted transactions, "
        f"anomalies {summary['anomalies']}, {time.monotonic() - t0:.0f}s")
    for fault, entry in sorted(summary["per_fault"].items()):
        say(f"  {fault:<18} rounds {entry['rounds']:>3}  unavailable max {entry['unavailable_max_s']:5.1f}s "
            f"mean {entry['unavailable_mean_s']:5.1f}s")
    return document


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=None, help="default: random (printed)")
    parser.add_argument("--target", choices=TARGETS, default="grete")
    parser.add_argument("--unclean", action="store_true",
                        help="unclean.leader.election.enable=true and the unclean-election fault only "
                             "(unless --faults): the checker must then report lost writes")
    parser.add_argument("--faults", default=None,
                        help=f"comma-separated, of {sorted(ALL_FAULTS)}")
    parser.add_argument("--out", default=None, help="JSON result (default jepsen-results/<target>-seed<seed>.json)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster directory (logs, data)")
    parser.add_argument("--netns", action="store_true",
                        help="each broker in its own network namespace (root): adds the partition faults")
    parser.add_argument("--snapshot-often", action="store_true",
                        help=f"KRaft targets ({', '.join(KRAFT_TARGETS)}): controllers and brokers snapshot their "
                             "metadata at every commit and clean their log past older snapshots, so nodes that "
                             "fall behind load the leader's snapshot (FetchSnapshot)")
    args = parser.parse_args(argv)
    if args.snapshot_often and args.target not in KRAFT_TARGETS:
        parser.error(f"--snapshot-often needs a KRaft target ({', '.join(KRAFT_TARGETS)})")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    faults = args.faults.split(",") if args.faults else (["unclean-election"] if args.unclean else None)
    for fault in faults or []:
        if fault not in ALL_FAULTS:
            parser.error(f"unknown fault {fault}")
    out = args.out or (f"jepsen-results/{args.target}-seed{seed}{'-unclean' if args.unclean else ''}"
                       f"{'-snapshot-often' if args.snapshot_often else ''}.json")
    document = run(args.target, args.rounds, seed, args.unclean, faults, out, args.keep,
                   say=lambda line: print(line, flush=True), netns=args.netns, snapshot_often=args.snapshot_often)
    print(f"result: {out}")
    summary = document["summary"]
    return 1 if any(summary["anomalies"].values()) or summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
