"""What a KRaft controller (process.roles=controller) advertises of the admin APIs: the versions
Kafka 4.3.1's ControllerApis advertises (its ak-4.3 specs with the "controller" listener)."""

from __future__ import annotations

from grete.broker.requests.registry import advertised_versions

KAFKA_4_3_CONTROLLER = {29: (1, 3), 30: (1, 3), 31: (1, 3), 32: (1, 4), 33: (0, 2), 43: (0, 2), 44: (0, 1), 49: (0, 1),
                        50: (0, 0), 51: (0, 0), 59: (0, 1), 64: (0, 0)}


def test_a_controller_advertises_the_admin_apis_at_kafka_s_controller_versions() -> None:
    ranges = {key: (low, high) for key, low, high in advertised_versions(controller_only=True)}
    assert {key: ranges.get(key) for key in KAFKA_4_3_CONTROLLER} == KAFKA_4_3_CONTROLLER

