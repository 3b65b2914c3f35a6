"""The advertised API profile against Kafka 4.3.1's: every API key and version range a
Kafka 4.3.1 broker advertises, recorded here, must be what grete's single node advertises, except the
difference listed below, with its reason (docs/compatibility.md, "The advertised profile").

Against --target kafka-4 the recording itself is checked against the live broker, so it cannot drift
from what it claims to be."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.messages import ApiVersionsRequest, ApiVersionsResponse  # noqa: E402
from grete.testing._wire import Wire  # noqa: E402

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="the profile of Kafka 4.3.1")

# Kafka 4.3.1's ApiVersions v4 (single KRaft node, default configs): key -> (min, max).
KAFKA_4_3_1 = {
    0: (0, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4),
    13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2),
    22: (0, 5), 23: (2, 4), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 2), 28: (0, 5), 29: (1, 3), 30: (1, 3),
    31: (1, 3), 32: (1, 4), 33: (0, 2), 34: (1, 2), 35: (1, 5), 36: (0, 2), 37: (0, 3), 38: (1, 3), 39: (1, 2),
    40: (1, 2), 41: (1, 3), 42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1), 46: (0, 0), 47: (0, 0), 48: (0, 1),
    49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2), 57: (0, 2), 60: (0, 2), 61: (0, 0), 64: (0, 0), 65: (0, 0),
    66: (0, 2), 68: (0, 1), 69: (0, 1), 74: (0, 1), 75: (0, 0), 76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2),
    80: (0, 1), 81: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1), 88: (0, 0), 89: (0, 0),
    90: (0, 1), 91: (0, 0), 92: (0, 0),
}

# KRaft's voter changes: the single node's quorum is itself alone (it describes it, DescribeQuorum,
# but has no voter to add or remove). UnregisterBroker it serves, as Kafka's combined node of one.
KRAFT_ONLY = {80: "AddRaftVoter", 81: "RemoveRaftVoter"}


def advertised(broker) -> dict[int, tuple[int, int]]:
    host, port = broker.address
    wire = Wire(host, int(port), timeout=30)
    try:
        answer = wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                           ApiVersionsResponse, 3)
    finally:
        wire.close()
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def test_profile(broker, target):
    live = advertised(broker)
    if not target.startswith("grete"):
        assert live == KAFKA_4_3_1
        return
    expected: dict[int, tuple[int, int]] = {}
    for key, versions in KAFKA_4_3_1.items():
        if key not in KRAFT_ONLY or target == "grete-kraft":  # a cluster's brokers forward them
            expected[key] = versions
    assert live == expected
