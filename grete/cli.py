"""Command line: ``grete serve [server.properties] [--override key=value ...]``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="grete", description="Kafka-compatible broker")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a broker")
    serve.add_argument("properties", nargs="?", help="server.properties file")
    serve.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a property, as kafka-server-start.sh takes it")
    args = parser.parse_args(argv)
    if args.command == "serve":
        print("grete: the broker is not built yet", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
