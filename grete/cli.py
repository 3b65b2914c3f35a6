"""Command line: ``grete serve [server.properties] [--override key=value ...]``."""

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
    local = sub.add_parser("cluster", help="run ZooKeeper and N brokers on this machine until Ctrl-C")
    local.add_argument("--brokers", type=int, default=3, help="number of brokers, ids 1..N (default 3)")
    local.add_argument("--dir", default="./grete-cluster", help="data directory (default ./grete-cluster)")
    local.add_argument("--port", type=int, default=0,
                       help="first broker port; broker i listens on PORT+i-1 (default: free ports)")
    local.add_argument("--zookeeper-port", type=int, default=0, help="ZooKeeper's port (default: a free one)")
    local.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="a broker property for every broker (repeatable)")
    args = parser.parse_args(argv)
    if args.command == "cluster":
        return run_cluster(args)

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    from grete.broker.config import BrokerConfig, ConfigError, StartupError
    from grete.broker.server import embedded_config, run

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


def run_cluster(args: argparse.Namespace) -> int:
    """``grete cluster``: ZooKeeper and N brokers, the bootstrap servers printed, all stopped on
    Ctrl-C (or SIGTERM). The data stays in --dir, so the same command starts the cluster again."""
    import signal
    import threading

    from grete.testing.cluster import ZooKeeperUnavailable, cluster
    from grete.testing.common import BrokerStartError

    overrides = dict(item.split("=", 1) for item in args.override)
    replication = str(min(3, args.brokers))
    overrides.setdefault("offsets.topic.replication.factor", replication)
    overrides.setdefault("transaction.state.log.replication.factor", replication)
    overrides.setdefault("transaction.state.log.min.isr", str(min(2, args.brokers)))
    ports = {i: args.port + i - 1 for i in range(1, args.brokers + 1)} if args.port else None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with cluster(args.brokers, directory=args.dir, overrides=overrides, ports=ports,
                     zookeeper_port=args.zookeeper_port or None) as running:
            print(f"ZooKeeper: {running.zookeeper.connect}", flush=True)
            print(f"bootstrap servers: {running.bootstrap_servers}", flush=True)
            print(f"data and logs: {running.directory}; Ctrl-C stops every process", flush=True)
            stop.wait()
            print("stopping...", flush=True)
    except (BrokerStartError, ZooKeeperUnavailable) as exc:
        print(f"grete cluster: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
