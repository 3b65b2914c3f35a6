"""Apicurio Registry 3.3.3 with kafkasql storage (its state in the topic ``kafkasql-journal``) on a
fresh single node of the session's target (grete, or Kafka with ``--target=kafka-4`` /
``--target=kafka-3.9``), driven through its Confluent-compatible REST API.

A schema is registered and evolved under BACKWARD compatibility (a new field with a default is
accepted, a changed field type refused with 409), the registry restarts and reads everything back
from the journal; then ten fresh starts in a row (a new broker each) must each get ready and take a
registration within the start deadline (apicurio_registry.START_TIMEOUT): a registry whose journal
reader gets no partition never gets ready. Each start is a Quarkus JVM of 40-50 s here, so the file
is ``long``; ``-s`` prints the timings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
from apicurio_registry import V1, Registry, Start, evolve_restart_read_back, summary

pytestmark = [pytest.mark.long, pytest.mark.timeout(2400)]

FRESH_STARTS = 10
FreshBroker = Callable[[], AbstractContextManager[str]]


def test_register_evolve_restart_read_back(fresh_broker: FreshBroker,
                                           make_registry: Callable[[str], Registry]) -> None:
    with fresh_broker() as bootstrap:
        registry = make_registry(bootstrap)
        evolve_restart_read_back(registry, "orders-value")
    print(summary("register, evolve, restart", registry.starts))


def test_ten_fresh_starts(fresh_broker: FreshBroker, make_registry: Callable[[str], Registry]) -> None:
    """Each start: a new broker, a registry that creates its topics and joins a new group, one schema
    registered and read back by its id."""
    starts: list[Start] = []
    for n in range(FRESH_STARTS):
        with fresh_broker() as bootstrap:
            registry = make_registry(bootstrap)
            registry.start()
            status, body = registry.register(f"fresh-{n}-value", V1)
            assert status == 200, f"start {n}: {status} {body}"
            assert json.loads(registry.get(f"/schemas/ids/{body['id']}")["schema"]) == json.loads(V1)
            registry.stop()
            starts += registry.starts
    print(summary(f"{FRESH_STARTS} fresh starts", starts))
    assert all(s.first_registration is not None for s in starts)
