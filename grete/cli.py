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
    args = parser.parse_args(argv)

    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    from grete.broker.config import BrokerConfig, ConfigError
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
    except OSError as exc:  # e.g. the port is in use
        print(f"grete: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
