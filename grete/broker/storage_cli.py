"""``grete storage``'s command line (kafka-storage's: info, format, random-uuid), apart from the
tool itself (grete/broker/storage_tool.py), so that building ``grete``'s parser for ``grete serve``
does not import the formatter's modules (SCRAM, delegation tokens, the metadata records) at start."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from grete.broker.requests import release_versions as rv


class _Parser(argparse.ArgumentParser):
    """argparse4j exits with 1 on a bad command line (Python's argparse: 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    storage = sub.add_parser("storage", help="format and inspect log directories, as kafka-storage does",
                             description="The Kafka storage tool.")
    commands = storage.add_subparsers(dest="storage_command", required=True, parser_class=_Parser)
    info = commands.add_parser("info", help="Get information about the Kafka log directories on this node.")
    info.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    fmt = commands.add_parser("format", help="Format the Kafka log directories on this node.")
    fmt.add_argument("--config", "-c", required=True, help="The Kafka configuration file to use.")
    fmt.add_argument("--cluster-id", "-t", required=True, help="The cluster ID to use.")
    fmt.add_argument("--add-scram", "-S", action="append", default=[],
                     help="A SCRAM_CREDENTIAL to add to the __cluster_metadata log e.g. "
                          "'SCRAM-SHA-256=[name=alice,password=alice-secret]'")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true",
                     help="When this option is passed, the format command will skip over already formatted "
                          "directories rather than failing.")
    fmt.add_argument("--release-version", "-r",
                     help=f"The release version to use for the initial feature settings. The minimum is "
                          f"{rv.METADATA_VERSIONS[0]}; the default is {rv.LATEST_PRODUCTION}")
    fmt.add_argument("--feature", "-f", action="append", default=[],
                     help="The setting to use for a specific feature, in feature=level format. "
                          "For example: `kraft.version=1`.")
    quorum = fmt.add_mutually_exclusive_group()
    quorum.add_argument("--standalone", "-s", action="store_true",
                        help="Used to initialize a controller as a single-node dynamic quorum.")
    quorum.add_argument("--no-initial-controllers", "-N", action="store_true",
                        help="Used to initialize a server without specifying a dynamic quorum.")
    quorum.add_argument("--initial-controllers", "-I",
                        help="Used to initialize a server with the specified dynamic quorum: "
                             "id@hostname:port:directory,...")
    commands.add_parser("random-uuid", help="Print a random UUID.")
