"""Run a broker until SIGTERM/SIGINT: ``grete serve``."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from grete.broker.config import BrokerConfig, StartupError
from grete.broker.network.eventloop import new_event_loop
from grete.broker.node import Node

log = logging.getLogger("grete")

# The embedded single-node default (no properties file): a newcomer's first consumer group should
# not wait Kafka's 3 s initial rebalance delay, and there is no ZooKeeper.
EMBEDDED_DEFAULTS = {
    "group.initial.rebalance.delay.ms": "0",
}


def embedded_config(overrides: list[str] | tuple[str, ...] = (), *, strict: bool = False) -> BrokerConfig:
    items = [f"{k}={v}" for k, v in EMBEDDED_DEFAULTS.items()] + list(overrides)
    return BrokerConfig.load(None, items, strict=strict)


async def serve(config: BrokerConfig, *, started: float | None = None) -> int:
    node = Node(config)
    broker = node.broker
    try:
        await node.start()
    except StartupError:  # e.g. a KRaft broker the controller quorum never registered: closed cleanly
        await node.stop()
        raise
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: asyncio.ensure_future(node.stop()))
    elapsed = time.monotonic() - (started if started is not None else broker.started_at)
    where = ", ".join(f"{b.name}://{b.host or '0.0.0.0'}:{b.port}" for b in broker.bound)
    log.info("grete node %d serving on %s (data in %s, cluster %s) in %.3f s", broker.node_id, where,
             ", ".join(str(d) for d in broker.log_dirs), broker.metadata.cluster_id, elapsed)
    await node.wait_stopped()
    if node.exit_code:
        log.error("grete node %d stopped: %s", broker.node_id, node.halted_because)
    else:
        log.info("grete node %d stopped cleanly", broker.node_id)
    return node.exit_code


def run(config: BrokerConfig, *, started: float | None = None) -> int:
    """Serve until stopped; the process's exit status."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(serve(config, started=started))
