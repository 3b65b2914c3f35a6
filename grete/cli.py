"""Command line: ``grete serve [server.properties] [--override key=value ...]``, ``grete cluster``
and ``grete host`` (docs/cluster.md), ``grete scram add`` (docs/security.md) and ``grete storage`` (kafka-storage's
random-uuid, format and info; docs/operations.md)."""

from __future__ import annotations

import argparse
import logging
import sys
import time


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(prog="grete", description="Kafka-compatible broker")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker (embedded single node without a properties file)")
    serve.add_argument("properties", nargs="?", help="server.properties file, as kafka-server-start.sh takes")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a property (repeatable)")
    serve.add_argument("--log-level", default="INFO", help="Python logging level (default INFO)")
    local = sub.add_parser("cluster", help="run a KRaft controller quorum (or ZooKeeper) and N brokers on this "
                           "machine until Ctrl-C; status, restart N, stop [N] ask the running one (docs/cluster.md)")
    local.add_argument("action", nargs="?", choices=["status", "restart", "stop"],
                       help="ask the cluster running in --dir: list its brokers, restart or stop one "
                            "(or, with no N, stop everything); without it, run the cluster")
    local.add_argument("broker", nargs="?", type=int, help="a broker id, for restart and stop")
    local.add_argument("--brokers", type=int, default=3, help="number of brokers, ids 1..N (default 3)")
    local.add_argument("--dir", default="./grete-cluster", help="data directory (default ./grete-cluster)")
    local.add_argument("--port", type=int, default=0,
                       help="first broker port; broker i listens on PORT+i-1 (default: free ports)")
    local.add_argument("--controllers", type=int, default=3,
                       help="KRaft controllers, ids 1001.. (default 3; one process each)")
    local.add_argument("--controller-port", type=int, default=0,
                       help="first controller port; controller 1000+i listens on PORT+i-1 (default: free ports)")
    local.add_argument("--combined", action="store_true",
                       help="every broker is also a controller (process.roles=broker,controller), "
                            "with --controller-port for broker i's controller listener; no controller processes")
    local.add_argument("--zookeeper", action="store_true",
                       help="coordinate through ZooKeeper, as Kafka 3.9 (default: a KRaft controller quorum)")
    local.add_argument("--zookeeper-port", type=int, default=0,
                       help="ZooKeeper's port, with --zookeeper (default: a free one)")
    local.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a broker property for every broker (repeatable)")
    host = sub.add_parser("host", help="run several brokers on this host, one per core by default, from one "
                          "broker's properties (docs/cluster.md, \"Several brokers per host\")")
    host.add_argument("properties", help="the first broker's server.properties for this host: its node.id "
                      "(or broker.id), listeners, log.dirs and the cluster's controllers (or ZooKeeper)")
    host.add_argument("--brokers", default="auto",
                      help="how many brokers: a number, or auto for one per core (default auto)")
    host.add_argument("--dir", default="./grete-host",
                      help="where each broker's properties and log go (default ./grete-host)")
    host.add_argument("--port-stride", type=int, default=None,
                      help="broker i's ports are the file's plus i times this (default: the span of the "
                           "file's ports, so listeners never overlap)")
    host.add_argument("--cluster-id", help="KRaft: format log dirs not formatted yet with this cluster id")
    host.add_argument("--dry-run", action="store_true", help="print each broker's properties and start nothing")
    host.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                      help="a property for every broker (repeatable)")
    scram = sub.add_parser("scram", help="write SCRAM credentials before the first start (no PLAIN login needed)")
    scram.add_argument("scram_action", choices=["add"], metavar="add", help="write the credentials given")
    scram.add_argument("--config", required=True, metavar="server.properties",
                       help="the broker's properties: its log dir, or zookeeper.connect for a cluster")
    scram.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a property (repeatable)")
    scram.add_argument("--add-scram", action="append", default=[], metavar="'SCRAM-SHA-256=[name=N,password=P]'",
                       help="a credential as kafka-storage format takes it (repeatable); iterations=N optional")
    scram.add_argument("--user", help="the user name (with --password)")
    scram.add_argument("--password", help="the user's password (with --user)")
    scram.add_argument("--mechanism", default="SCRAM-SHA-256", help="SCRAM-SHA-256 (default) or SCRAM-SHA-512")
    scram.add_argument("--iterations", type=int, default=4096, help="4096 (default) to 16384")
    from grete.broker import storage_cli

    storage_cli.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "storage":
        from grete.broker import storage_tool  # the formatter's modules, for this command only

        return storage_tool.run(args)
    if args.command == "cluster":
        return run_cluster(args) if args.action is None else control_cluster(args)
    if args.command == "scram":
        return add_scram(args)
    if args.command == "host":
        return run_host(args)

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    from grete.broker.config import BrokerConfig, ConfigError, StartupError
    from grete.broker.server import embedded_config, run
    from grete.protocol.errors import KafkaError

    try:
        if args.properties:
            config = BrokerConfig.load(args.properties, args.override)
        else:
            config = embedded_config(args.override)
    except (ConfigError, OSError) as exc:
        print(f"grete: {exc}", file=sys.stderr)
        return 2
    try:
        return run(config, started=started)
    except ConfigError as exc:  # found while starting, e.g. an SSL listener without a keystore
        print(f"grete: {exc}", file=sys.stderr)
        return 2
    except StartupError as exc:  # e.g. ZooKeeper unreachable, the broker id taken
        print(f"grete: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the port is in use
        print(f"grete: {exc}", file=sys.stderr)
        return 1
    except KafkaError as exc:  # e.g. a log dir formatted for another node or cluster
        print(f"grete: {exc.message}", file=sys.stderr)
        return 1


def run_cluster(args: argparse.Namespace) -> int:
    """``grete cluster``: a KRaft controller quorum (or, with --zookeeper, ZooKeeper) and N brokers,
    the bootstrap servers printed, supervised until Ctrl-C (or SIGTERM, or ``grete cluster stop``),
    which stops every process it runs. The data stays in --dir, so the same command starts the
    cluster again."""
    import asyncio
    import signal
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from grete.testing.cluster import ZooKeeperUnavailable, cluster
    from grete.testing.common import BrokerStartError
    from grete.testing.supervisor import ClusterSupervisor, ControlError, claim_socket

    overrides = dict(item.split("=", 1) for item in args.override)
    replication = str(min(3, args.brokers))
    overrides.setdefault("offsets.topic.replication.factor", replication)
    overrides.setdefault("transaction.state.log.replication.factor", replication)
    overrides.setdefault("transaction.state.log.min.isr", str(min(2, args.brokers)))
    ports = {i: args.port + i - 1 for i in range(1, args.brokers + 1)} if args.port else None
    if args.combined and args.zookeeper:
        print("grete cluster: --combined is a KRaft cluster; it does not go with --zookeeper", file=sys.stderr)
        return 2
    controllers = 0 if args.zookeeper or args.combined else max(1, args.controllers)
    first_voter = 1 if args.combined else 1001
    voters = args.brokers if args.combined else controllers
    controller_ports = ({first_voter + i: args.controller_port + i for i in range(voters)}
                        if args.controller_port else None)
    directory = Path(args.dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        control = claim_socket(directory)
    except (ControlError, OSError) as exc:
        print(f"grete cluster: {exc}", file=sys.stderr)
        return 1
    # Until the supervisor's loop takes them over: SIGTERM while starting stops what started.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        # The lifecycle thread outlives the cluster: brokers it restarted die with it.
        with ThreadPoolExecutor(1, thread_name_prefix="lifecycle") as lifecycle, \
                cluster(args.brokers, directory=directory, overrides=overrides, ports=ports,
                        zookeeper_port=args.zookeeper_port or None, controllers=controllers,
                        controller_ports=controller_ports, combined=args.combined) as running:
            if running.zookeeper is not None:
                print(f"ZooKeeper: {running.zookeeper.connect}", flush=True)
            if running.quorum is not None:
                kind = "combined with the brokers" if args.combined else "KRaft"
                print(f"controllers ({kind}, cluster id {running.quorum.cluster_id}): {running.quorum.voters}",
                      flush=True)
            print(f"bootstrap servers: {running.bootstrap_servers}", flush=True)
            logs = ("zookeeper.log" if running.zookeeper is not None
                    else "each a controller too" if args.combined else "controller-<id>.log")
            print(f"data and logs (broker-<id>.log, {logs}): {running.directory}", flush=True)
            print(f"grete cluster status|restart N|stop [N] --dir {args.dir}; Ctrl-C stops every process",
                  flush=True)
            asyncio.run(ClusterSupervisor(running, lifecycle).run(control))
    except (BrokerStartError, ZooKeeperUnavailable) as exc:
        print(f"grete cluster: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopped while starting", file=sys.stderr)
    return 0


def run_host(args: argparse.Namespace) -> int:
    """``grete host``: the brokers laid out for this host's cores, run until Ctrl-C or SIGTERM."""
    import asyncio
    from pathlib import Path

    from grete.broker.config import ConfigError
    from grete.broker.host_layout import HostLayoutError
    from grete.broker.host_runner import HostBrokers, HostError, host_facts, plan, write_layout

    try:
        layouts = plan(args, host_facts())
        if args.dry_run:
            for items in layouts:
                print("\n".join(f"{key}={value}" for key, value in items.items()), end="\n\n")
            return 0
        brokers = HostBrokers(Path(args.dir), write_layout(Path(args.dir), layouts, args.cluster_id))
    except (HostError, HostLayoutError, ConfigError, OSError) as exc:
        print(f"grete host: {exc}", file=sys.stderr)
        return 2
    brokers.start()
    for items in layouts:
        broker_id = items.get("node.id") or items["broker.id"]
        print(f"broker {broker_id} (pid {brokers.processes[broker_id].pid}): {items.get('listeners', '')} "
              f"log.dirs={items['log.dirs']} "
              f"broker.rack={items['broker.rack']}", flush=True)
    print(f"properties and logs (broker-<id>.log): {args.dir}; Ctrl-C stops every broker", flush=True)
    return asyncio.run(brokers.run())


def control_cluster(args: argparse.Namespace) -> int:
    """``grete cluster status|restart N|stop [N] --dir DIR``: ask the ``grete cluster`` running there."""
    from pathlib import Path

    from grete.testing.supervisor import ControlError, request

    if args.action == "restart" and args.broker is None:
        print("grete cluster restart: which broker? (grete cluster restart N)", file=sys.stderr)
        return 2
    if args.action == "status" and args.broker is not None:
        print("grete cluster status takes no broker id", file=sys.stderr)
        return 2
    line = args.action if args.broker is None else f"{args.action} {args.broker}"
    try:
        code, text = request(Path(args.dir), line)
    except ControlError as exc:
        print(f"grete cluster: {exc}", file=sys.stderr)
        return 1
    print(text, end="", file=sys.stdout if code == 0 else sys.stderr, flush=True)
    return code


def add_scram(args: argparse.Namespace) -> int:
    """``grete scram add``: credentials written where the broker keeps them, before it starts."""
    from grete.broker.config import BrokerConfig, ConfigError
    from grete.broker.security.scram_bootstrap import (
        BrokerRunning,
        ScramUser,
        add_credentials,
        checked,
        parse_add_scram,
    )

    try:
        users = [parse_add_scram(spec) for spec in args.add_scram]
        if (args.user is None) != (args.password is None):
            raise ConfigError("--user and --password go together")
        if args.user is not None:
            users.append(checked(ScramUser(args.user, args.mechanism, args.password, args.iterations)))
        if not users:
            raise ConfigError("nothing to add: give --user and --password, or --add-scram")
        config = BrokerConfig.load(args.config, args.override)
        where = add_credentials(config, users)
    except (ConfigError, OSError) as exc:
        print(f"grete scram: {exc}", file=sys.stderr)
        return 2
    except BrokerRunning as exc:
        print(f"grete scram: {exc}", file=sys.stderr)
        return 1
    for user in users:
        print(f"{user.mechanism} credential for {user.name} ({user.iterations} iterations) written to {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
