"""grete in a test suite: a real broker in-process, on a free port, with a temporary data dir.

    from grete.testing import broker

    with broker(overrides={"num.partitions": "3"}) as b:
        producer = KafkaProducer(bootstrap_servers=b.bootstrap_servers)
        with b.faults.fail("Produce", ErrorCode.NOT_LEADER_OR_FOLLOWER, times=2):
            ...

The broker runs its own event loop in a background thread; leaving the block stops it cleanly,
joins the thread and removes its data dir (unless ``data_dir`` was given). ``subprocess=True``
runs it as a separate ``grete serve`` process instead (see :mod:`grete.testing.process`).
Faults: :mod:`grete.testing.faults`. Guide: docs/testing.md.
"""

from __future__ import annotations

from grete.testing.common import BrokerStartError, scratch_root
from grete.testing.inprocess import RunningBroker, broker

__all__ = ["BrokerStartError", "RunningBroker", "broker", "scratch_root"]
