"""Optional features are loaded by name when the configuration switches them on or on first use, so a
broker that does not use them does not import them at start-up (docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grete.testing import broker
from grete.testing._wire import Wire
from tests.broker._txn import Txn

# Modules a single node uses only for a feature it is not asked for at start.
OPTIONAL = ("grete.broker.security.authorizer", "grete.broker.groups.transactions", "grete.coordinator.transactions.txn",
            "grete.broker.cluster.markers", "grete.broker.cluster.txn_verifier", "grete.protocol.messages.fetch",
            "grete.broker.quorum.controller_node", "grete.broker.quorum.driver", "grete.broker.network.tls_records")

START_AND_LIST = """
import asyncio, sys
from grete.broker.network.eventloop import new_event_loop
from grete.broker.node import Node
from grete.broker.server import embedded_config

async def main() -> None:
    node = Node(embedded_config(["listeners=PLAINTEXT://127.0.0.1:0", *sys.argv[2:]]))
    await node.start()
    print(" ".join(m for m in sys.argv[1].split(",") if m in sys.modules))
    await node.stop()

with asyncio.Runner(loop_factory=new_event_loop) as runner:
    runner.run(main())
"""


def _loaded_after_start(data: Path, *overrides: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", START_AND_LIST, ",".join(OPTIONAL), f"log.dirs={data}",
                             *overrides], capture_output=True, text=True, timeout=120, check=True)
    return set(result.stdout.split())


def test_a_node_imports_only_the_features_its_configuration_uses(tmp_path: Path) -> None:
    assert _loaded_after_start(tmp_path / "plain") == set()
    with_acls = _loaded_after_start(tmp_path / "acls", "authorizer.class.name=kafka.security.authorizer.AclAuthorizer")
    assert with_acls == {"grete.broker.security.authorizer"}


def test_the_transaction_coordinator_starts_on_first_use_or_with_state_to_load(tmp_path: Path) -> None:
    with broker(data_dir=tmp_path) as first:
        assert first.broker.coordinators()[1] is None  # nothing to load: not started yet
        wire = Wire(first.host, first.port)
        txn = Txn(wire)
        assert txn.init() == 0
        assert first.broker.coordinators()[1] is not None
        wire.close()
    with broker(data_dir=tmp_path) as second:
        assert second.broker.coordinators()[1] is not None  # __transaction_state to load: started with the node


SERVE_IMPORTS = """
import sys
import grete.broker.server as server
server.run = lambda config, started=None: print("storage_tool" if "grete.broker.storage_tool" in sys.modules else "-") or 0
from grete.cli import main
main(["serve", "--override", "log.dirs=" + sys.argv[1]])
"""


def test_grete_serve_builds_its_command_line_without_the_storage_tool(tmp_path: Path) -> None:
    """``grete storage``'s parser is part of ``grete``'s, but the formatter behind it (SCRAM,
    delegation tokens, metadata records: ~60 ms at start) loads only for that command."""
    result = subprocess.run([sys.executable, "-c", SERVE_IMPORTS, str(tmp_path)], capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.split() == ["-"]
