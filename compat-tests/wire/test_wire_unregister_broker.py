"""UnregisterBroker (64) on a single KRaft node: an id that is not registered is refused with
BROKER_ID_NOT_REGISTERED, with Kafka 4.3.1's message (Kafka 3.9.2's KRaft node sends the code
alone). The same raw request against Kafka 4.3.1, Kafka 3.9.2 and grete."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import UnregisterBrokerRequest, UnregisterBrokerResponse  # noqa: E402
from grete.testing._wire import Wire  # noqa: E402


def test_an_unknown_broker_id_is_not_registered(broker, target):
    host, port = broker.address
    wire = Wire(host, int(port), timeout=30)
    try:
        answer = wire.call(UnregisterBrokerRequest(broker_id=4242), UnregisterBrokerResponse, 0)
    finally:
        wire.close()
    assert answer.error_code == ErrorCode.BROKER_ID_NOT_REGISTERED
    if target != "kafka-3.9":
        assert answer.error_message == "Broker ID 4242 is not currently registered"
