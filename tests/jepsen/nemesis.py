"""Faults, and healing. Each fault takes the cluster, a ZooKeeper client (direct, not proxied), the
round's topic and a seeded random generator, does its damage, undoes what it can, and returns a
log of what it did (it heals nothing it need not: ``heal`` restarts and resumes everything)."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from grete.broker.child_process import spawn
from tests.jepsen import firewall, flood
from tests.jepsen.clusters import OVERRIDES, SESSION_TIMEOUT_MS, all_proxies, second_process_command
from tests.jepsen.views import View

SESSION_S = SESSION_TIMEOUT_MS / 1000
LAG_S = int(OVERRIDES["replica.lag.time.max.ms"]) / 1000
SECOND_PROCESS_TIMEOUT_S = 90.0  # a JVM on two busy cores takes a while to reach its log dirs
# request-memory-flood's cluster settings: a small request pool, and requests no larger than it
# (Kafka refuses to start with socket.request.max.bytes above queued.max.request.bytes).
REQUEST_POOL_BYTES = 4 * 1024 * 1024
REQUEST_POOL_OVERRIDES = {"queued.max.request.bytes": str(REQUEST_POOL_BYTES),
                          "socket.request.max.bytes": str(REQUEST_POOL_BYTES)}


class Finding(Exception):
    """What a fault itself saw go wrong (not a checker anomaly): the round counts as an error."""


class Events:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.lines: list[str] = []

    def __call__(self, line: str) -> None:
        self.lines.append(f"+{time.monotonic() - self.t0:5.1f}s {line}")


def alive(cluster: Any) -> list[int]:
    return sorted(b for b, proc in cluster.brokers.items() if proc.process.poll() is None)


def kill_leader(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    p = rng.randrange(3)
    leader = view.partition_state(topic, p)["leader"]
    log(f"SIGKILL broker {leader}, leader of p{p}")
    cluster.kill_broker(leader)
    time.sleep(rng.uniform(2, 10))
    log(f"restart broker {leader}")
    cluster.start_broker(leader)


def kill_follower(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    p = rng.randrange(3)
    state = view.partition_state(topic, p)
    follower = rng.choice(sorted(b for b in state["isr"] if b != state["leader"]))
    log(f"SIGKILL broker {follower}, a follower of p{p} (leader {state['leader']})")
    cluster.kill_broker(follower)
    time.sleep(rng.uniform(2, 10))
    log(f"restart broker {follower}")
    cluster.start_broker(follower)


def kill_controller(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    victim = view.controller()
    log(f"SIGKILL broker {victim}, the controller")
    cluster.kill_broker(victim)
    time.sleep(rng.uniform(2, 10))
    log(f"restart broker {victim}")
    cluster.start_broker(victim)


def pause_leader(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """A zombie leader: SIGSTOP past the ZooKeeper session timeout (its session expires, leaders
    move), then SIGCONT: it must find itself fenced and follow."""
    p = rng.randrange(3)
    leader = view.partition_state(topic, p)["leader"]
    pause = SESSION_S + rng.uniform(1, 5)
    log(f"SIGSTOP broker {leader}, leader of p{p}, for {pause:.1f}s")
    cluster.pause_broker(leader)
    time.sleep(pause)
    log(f"SIGCONT broker {leader}")
    cluster.resume_broker(leader)


def pause_any(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """SIGSTOP of any broker, sometimes shorter than the session timeout (an ISR shrink only)."""
    victim = rng.choice(alive(cluster))
    pause = rng.uniform(2, SESSION_S + 4)
    log(f"SIGSTOP broker {victim} for {pause:.1f}s (controller {view.controller()})")
    cluster.pause_broker(victim)
    time.sleep(pause)
    log(f"SIGCONT broker {victim}")
    cluster.resume_broker(victim)


def rolling_restart(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """SIGTERM (controlled shutdown) each broker in turn, waiting for it to rejoin every ISR."""
    order = alive(cluster)
    rng.shuffle(order)
    for broker in order:
        log(f"SIGTERM broker {broker}")
        code = cluster.stop_broker(broker)
        log(f"broker {broker} exited {code}; restart")
        cluster.start_broker(broker)
        full_isr(view, [topic], 60, log)


def zk_isolate_leader(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """Cut a leader off from ZooKeeper only (its proxy closes and refuses connections), past the
    session timeout: the controller moves its leaderships while it still talks to clients and to
    the other brokers (the broker partition of Kafka's round_trip_fault_test)."""
    p = rng.randrange(3)
    leader = view.partition_state(topic, p)["leader"]
    cut = SESSION_S + rng.uniform(1, 5)
    log(f"cut broker {leader} (leader of p{p}) from ZooKeeper for {cut:.1f}s")
    cluster.zk_proxies[leader].partition()
    time.sleep(cut)
    log(f"reconnect broker {leader} to ZooKeeper")
    cluster.zk_proxies[leader].heal()


def zk_pause(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """SIGSTOP ZooKeeper itself past the session timeout: on SIGCONT sessions may expire all at once."""
    pause = SESSION_S + rng.uniform(1, 4)
    log(f"SIGSTOP ZooKeeper for {pause:.1f}s")
    cluster.zookeeper.process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(pause)
    finally:
        cluster.zookeeper.process.send_signal(signal.SIGCONT)
    log("SIGCONT ZooKeeper")


def unclean_election(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """Force an unclean election: one follower stalls out of the ISR, acks=all writes go on with the
    two others, then both die and only the stale one is alive. With unclean.leader.election.enable
    it becomes leader and the writes it lacks are lost (as Kafka documents); without, the partition
    waits offline for an ISR member and nothing is lost."""
    p = rng.randrange(3)
    state = view.partition_state(topic, p)
    leader, boss = state["leader"], view.controller()
    candidates = [b for b in alive(cluster) if b not in (leader, boss)] or [b for b in alive(cluster) if b != leader]
    stale = rng.choice(candidates)
    other = next(b for b in alive(cluster) if b not in (leader, stale))
    log(f"p{p}: leader {leader}, controller {boss}; SIGSTOP broker {stale} past the session timeout")
    cluster.pause_broker(stale)
    deadline = time.monotonic() + 40
    while stale in view.partition_state(topic, p)["isr"] and time.monotonic() < deadline:
        time.sleep(0.2)
    log(f"ISR of p{p}: {view.partition_state(topic, p)['isr']}; writes go on without broker {stale}")
    time.sleep(3)
    log(f"SIGKILL brokers {leader} and {other}; SIGCONT broker {stale}")
    cluster.kill_broker(leader)
    cluster.kill_broker(other)
    cluster.resume_broker(stale)
    deadline = time.monotonic() + 2 * SESSION_S + 6
    while time.monotonic() < deadline:
        now = view.partition_state(topic, p)
        if now["leader"] == stale:
            log(f"unclean election: p{p} state {now}")
            break
        time.sleep(0.2)
    else:
        log(f"no election of broker {stale}: p{p} state {view.partition_state(topic, p)}")


def port_closed_leader(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """A zombie whose process lives: a leader's listener port refuses new connections and its open
    ones are reset (iptables and ss, firewall.py) while its ZooKeeper session goes on, for a hold
    shorter or longer than the session timeout. grete's controller fences it at once (fast
    failover) and lifts the fence when the port answers again under the same registration; it then
    follows. Kafka 3.9 fences nothing: the leader stays, unreachable, until the port opens."""
    p = rng.randrange(3)
    leader = view.partition_state(topic, p)["leader"]
    hold = rng.uniform(2, SESSION_S - 1) if rng.random() < 0.5 else rng.uniform(SESSION_S + 1, SESSION_S + 6)
    broker = cluster.brokers[leader]
    wall = firewall.Firewall(cluster.network.prefix(leader) if cluster.network is not None else [])  # its namespace
    log(f"close port {broker.port} of broker {leader} (leader of p{p}, controller {view.controller()}) "
        f"for {hold:.1f}s")
    try:
        wall.close_port(broker.host, broker.port)
        time.sleep(hold / 2)
        log(f"p{p} state with the port closed: {view.partition_state(topic, p)}, controller {view.controller()}")
        time.sleep(hold / 2)
    finally:
        wall.open_port()
    registered_now = sorted(view.registered())
    log(f"port of broker {leader} open again; p{p} state {view.partition_state(topic, p)}, "
        f"registered {registered_now}")


def second_process(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """A second broker process on a leader's own config and log dirs (same broker.id, a port of its
    own): the dirs' ``.lock`` (Kafka's LogManager rule) must stop it, with a non-zero exit naming
    the dir, before it reads or writes anything there. Anything else is a Finding; the round then
    checks the live broker lost nothing."""
    p = rng.randrange(3)
    victim = view.partition_state(topic, p)["leader"]
    directory = str(cluster.brokers[victim].data_dir)
    output = Path(cluster.directory) / f"broker-{victim}-second.log"
    output.unlink(missing_ok=True)
    log(f"start a second process of broker {victim} (leader of p{p}) on {directory}")
    process = spawn(second_process_command(cluster, victim), output)
    try:
        code: int | None = process.wait(SECOND_PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    text = output.read_text(errors="replace")
    said = [line for line in text.splitlines() if directory in line][:3] or text.splitlines()[-5:]
    log(f"second process of broker {victim}: exit {code if code is not None else 'none, killed'}; " + " | ".join(said))
    if code is None or code == 0 or directory not in text:
        raise Finding(f"a second process on {directory} was not refused: exit {code}, said {said}")


def request_memory_flood(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """Large Produce requests from several connections at a leader (flood.py), to a topic of their
    own with its every partition on that broker, past queued.max.request.bytes (the cluster runs
    with REQUEST_POOL_OVERRIDES when this fault is chosen): the round's writers slow down while
    the pool is used up, and must neither fail for good nor lose anything; no broker may stall."""
    p = rng.randrange(3)
    leader = view.partition_state(topic, p)["leader"]
    seconds = rng.uniform(4, 10)
    name = f"{topic}-flood"
    boss = cluster.brokers.get(view.controller(), cluster.brokers[leader])  # KRaft: any broker forwards it
    flood.create_topic((boss.host, boss.port), name, leader)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    broker = cluster.brokers[leader]
    log(f"flood broker {leader} (leader of p{p}) with {flood.PRODUCERS} producers for {seconds:.1f}s")
    try:
        done, probes = flood.run(cluster.bootstrap_servers, name, seconds, (broker.host, broker.port))
    finally:
        try:
            admin.delete_topics([name])[name].result(60)
        except Exception as exc:  # the round goes on; its checks do not read this topic
            log(f"deleting {name}: {exc!r}")
    log(f"flood: {done.sent_bytes / 1e6:.0f} MB queued, {done.acked} values acked, errors {done.errors}; "
        + "; ".join(probes))


def _network(cluster: Any) -> Any:
    network = getattr(cluster, "network", None)
    if network is None:
        raise RuntimeError("network faults need the brokers in network namespaces (run with --netns)")
    return network


def partition_leader(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """Cut a leader off from the other brokers (not from ZooKeeper, not from clients), past
    replica.lag.time.max.ms: it keeps its leaderships, its followers cannot fetch, it shrinks the ISR
    to itself, and with min.insync.replicas=2 acks=all writes to it fail until the partition heals."""
    p = rng.randrange(3)
    leader = view.partition_state(topic, p)["leader"]
    cut = rng.uniform(4, LAG_S + 6)
    log(f"cut broker {leader} (leader of p{p}) from the other brokers for {cut:.1f}s")
    network = _network(cluster)
    network.isolate(leader)
    time.sleep(cut)
    log(f"p{p} state before healing: {view.partition_state(topic, p)}; heal")
    network.heal()


def partition_pair(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """Cut a leader from one of its followers only: that follower drops out of the ISR after
    replica.lag.time.max.ms while writes go on with the other two, and catches up after the heal."""
    p = rng.randrange(3)
    state = view.partition_state(topic, p)
    follower = rng.choice(sorted(b for b in alive(cluster) if b != state["leader"]))  # RF 3 on 3 brokers
    cut = rng.uniform(4, LAG_S + 6)
    log(f"cut broker {state['leader']} (leader of p{p}) from broker {follower} for {cut:.1f}s")
    network = _network(cluster)
    network.cut(state["leader"], follower)
    time.sleep(cut)
    log(f"p{p} state before healing: {view.partition_state(topic, p)}; heal")
    network.heal()


def partition_controller(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """Cut the controller off from the other brokers while a leader dies elsewhere: its
    LeaderAndIsr and UpdateMetadata cannot reach them until the heal."""
    boss = view.controller()
    others = [b for b in alive(cluster) if b != boss]
    victim = rng.choice(others)
    log(f"cut broker {boss} (the controller) from the other brokers, then SIGKILL broker {victim}")
    network = _network(cluster)
    network.isolate(boss)
    time.sleep(1)
    cluster.kill_broker(victim)
    time.sleep(rng.uniform(3, 8))
    log(f"heal; restart broker {victim}")
    network.heal()
    cluster.start_broker(victim)


def kill_quorum_leader(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """SIGKILL the KRaft quorum's leader (the active controller): the voters elect another, the
    brokers (observers) find it, heartbeats and AlterPartition go there; then it restarts as a follower."""
    victim = view.controller()
    if victim < 0:
        raise Finding("no controller leads the quorum before the fault")
    log(f"SIGKILL controller {victim}, the quorum leader")
    cluster.quorum.kill(victim)
    time.sleep(rng.uniform(2, 10))
    log(f"quorum leader now {view.controller()}; restart controller {victim}")
    cluster.quorum.start_controller(victim)


def pause_controller(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """SIGSTOP a controller, the quorum leader half the time, sometimes past broker.session.timeout.ms:
    a paused leader is replaced after controller.quorum.fetch.timeout.ms and must step down when resumed;
    a new leader counts every unfenced broker as heard from, so none is fenced for the pause."""
    leader = view.controller()
    victim = leader if rng.random() < 0.5 or leader < 0 else rng.choice([c for c in cluster.quorum.ids if c != leader])
    if victim < 0:
        raise Finding("no controller leads the quorum before the fault")
    pause = rng.uniform(2, SESSION_S + 4)
    log(f"SIGSTOP controller {victim} ({'the' if victim == leader else 'not the'} quorum leader) for {pause:.1f}s")
    cluster.quorum.pause(victim)
    try:
        time.sleep(pause)
        log(f"quorum leader with {victim} paused: {view.controller()}")
    finally:
        cluster.quorum.resume(victim)
    log(f"SIGCONT controller {victim}")


def controllers_isolate_leader(cluster: Any, view: View, topic: str, rng: random.Random, log: Events) -> None:
    """Cut a leader off from every controller (its proxies close and refuse connections), past
    broker.session.timeout.ms, while it still talks to clients and the other brokers: the controller
    fences it and moves its leaderships; it can no longer learn so, and its followers must stop
    acknowledging its writes. Then it finds the quorum again and follows."""
    p = rng.randrange(3)
    leader = view.partition_state(topic, p)["leader"]
    cut = SESSION_S + rng.uniform(1, 5)
    log(f"cut broker {leader} (leader of p{p}) from the controllers for {cut:.1f}s")
    proxies = cluster.controller_proxies[leader].values()
    for proxy in proxies:
        proxy.partition()
    try:
        time.sleep(cut)
        log(f"p{p} state before healing: {view.partition_state(topic, p)}")
    finally:
        for proxy in proxies:
            proxy.heal()
    log(f"reconnect broker {leader} to the controllers")


Fault = Callable[[Any, View, str, random.Random, Events], None]


FAULTS: dict[str, Fault] = {
    "kill-leader": kill_leader,
    "kill-follower": kill_follower,
    "kill-controller": kill_controller,
    "pause-leader": pause_leader,
    "pause-any": pause_any,
    "rolling-restart": rolling_restart,
    "zk-isolate-leader": zk_isolate_leader,
    "zk-pause": zk_pause,
    "second-process": second_process,
    "request-memory-flood": request_memory_flood,
}
# In the mix when iptables can be used (root, iptables installed: firewall.available()).
FIREWALL_FAULTS = {"port-closed-leader": port_closed_leader}
EXTRA_FAULTS = {"unclean-election": unclean_election}
# Only with the brokers in network namespaces (run.py --netns).
NETWORK_FAULTS = {"partition-leader": partition_leader, "partition-pair": partition_pair,
                  "partition-controller": partition_controller}
# A KRaft cluster (--target grete-kraft or kafka-4.3): the broker faults that apply unchanged, and the
# controllers' own. Not: the ZooKeeper ones, unclean-election (grete controllers elect no unclean
# leader), partition-controller (the controllers are not brokers; quorum-cut-leader cuts
# a broker from them).
KRAFT_FAULTS: dict[str, Fault] = {
    **{name: FAULTS[name] for name in ("kill-leader", "kill-follower", "pause-leader", "pause-any", "rolling-restart",
                                       "second-process", "request-memory-flood")},
    "kill-quorum-leader": kill_quorum_leader,
    "pause-controller": pause_controller,
    "quorum-cut-leader": controllers_isolate_leader,
}
KRAFT_NETWORK_FAULTS = {name: NETWORK_FAULTS[name] for name in ("partition-leader", "partition-pair")}


def full_isr(view: View, topics: Iterable[str], timeout: float, log: Events | None = None) -> bool:
    """Every partition of ``topics`` led and with all its replicas in the ISR."""
    topics = list(topics)
    return _await(lambda: [line for topic in topics for line in view.unsettled(topic)], timeout,
                  "ISR not full", log)


def _await(missing: Callable[[], list[str]], timeout: float, what: str, log: Events | None) -> bool:
    """Until ``missing()`` is empty (True) or ``timeout`` has passed (False, logged with what is missing)."""
    deadline = time.monotonic() + timeout
    while True:
        left = missing()
        if not left:
            return True
        if time.monotonic() > deadline:
            if log is not None:
                log(f"{what} after {timeout:.0f}s: {left}")
            return False
        time.sleep(0.2)


def heal(cluster: Any, view: View, topics: Iterable[str], log: Events, timeout: float = 120) -> bool:
    """Everything back: proxies healed, ZooKeeper or the controllers and every broker resumed, dead
    ones restarted, every broker registered, then every partition of ``topics`` (and the internal
    ones) with a full ISR."""
    for proxy in all_proxies(cluster):
        proxy.heal()
    if getattr(cluster, "network", None) is not None:
        cluster.network.heal()
    if cluster.zookeeper is not None:
        cluster.zookeeper.process.send_signal(signal.SIGCONT)
    else:  # KRaft: start_controller waits for a quorum leader
        revive(cluster.quorum.controllers, cluster.quorum.resume, cluster.quorum.start_controller, "controller", log)
    revive(cluster.brokers, cluster.resume_broker, cluster.start_broker, "broker", log)
    return registered(view, sorted(cluster.brokers), timeout, log) and \
        full_isr(view, [*topics, "__transaction_state"], timeout, log)


def revive(processes: dict[int, Any], resume: Callable[[int], Any], start: Callable[[int], Any], kind: str,
           log: Events) -> None:
    """Every live one of ``processes`` resumed (SIGCONT), every dead one started again."""
    for node_id, proc in sorted(processes.items()):
        if proc.process.poll() is None:
            resume(node_id)
    for node_id, proc in sorted(processes.items()):
        if proc.process.poll() is not None:
            log(f"heal: restart {kind} {node_id} (exit code {proc.process.returncode})")
            start(node_id)


def registered(view: View, brokers: list[int], timeout: float, log: Events | None = None) -> bool:
    """Every broker registered. A full ISR alone does not say so: a broker whose session expired
    without the controller shrinking an ISR yet (it led none, or it was the controller) is absent
    until it re-registers, and the next round's topics then see fewer brokers."""
    return _await(lambda: [str(b) for b in sorted(set(brokers) - view.registered())], timeout,
                  "brokers not registered", log)
