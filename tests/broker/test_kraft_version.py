"""What a KRaft controller checks of the cluster before finalizing a feature level, as Kafka's
FeatureControlManager.reasonNotSupported: every registered broker and controller supports the level
(one that does not list the feature supports 0 only), and every voter has registered."""

from __future__ import annotations

import types
import uuid
from typing import Any

from grete.broker.quorum.brokers import Registrations
from grete.broker.quorum.kraft_version import ControllerKRaftVersion
from grete.protocol.metadata import RegisterBrokerRecord, RegisterControllerRecord


def _broker(broker_id: int, **ranges: tuple[int, int]) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(broker_id=broker_id, incarnation_id=uuid.uuid4(), broker_epoch=broker_id, features=[
        RegisterBrokerRecord.BrokerFeature(name=n.replace("_", "."), min_supported_version=lo, max_supported_version=hi)
        for n, (lo, hi) in ranges.items()])


def _controller(controller_id: int, **ranges: tuple[int, int]) -> RegisterControllerRecord:
    return RegisterControllerRecord(controller_id=controller_id, incarnation_id=uuid.uuid4(), features=[
        RegisterControllerRecord.ControllerFeature(name=n.replace("_", "."), min_supported_version=lo,
                                                   max_supported_version=hi)
        for n, (lo, hi) in ranges.items()])


async def _commit(_records: Any) -> None:
    return None


def _checks(found: Registrations, voters: set[int]) -> ControllerKRaftVersion:
    driver: Any = types.SimpleNamespace(raft=types.SimpleNamespace(voters=frozenset(voters)))
    return ControllerKRaftVersion(lambda: driver, _commit, lambda: found)


def test_every_registered_node_and_voter_is_checked_in_kafka_s_order_and_words() -> None:
    found = Registrations()
    for offset, record in enumerate([_broker(1, streams_version=(0, 1), share_version=(0, 1)),
                                     _broker(2, streams_version=(0, 1)),
                                     _controller(3000, streams_version=(0, 1), share_version=(1, 1))]):
        found.apply(record, offset)
    checks = _checks(found, {3000})
    assert checks.unsupported("streams.version", 1) is None
    assert checks.unsupported("streams.version", 2) == "Broker 1 only supports versions 0-1"
    assert checks.unsupported("share.version", 1) == "Broker 2 does not support this feature."
    assert checks.unsupported("share.version", 0) == "Controller 3000 only supports versions 1"
    assert checks.unsupported("group.version", 0) is None  # not listed anywhere: level 0 is fine
    assert _checks(found, {3000, 3001}).unsupported("streams.version", 1) == (
        "controller 3001 has not registered, and may not support this feature")
