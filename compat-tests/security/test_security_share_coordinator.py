"""Share coordinators under the StandardAuthorizer (Kafka 4.3.1 and grete; Kafka 3.9.2 has none):
FindCoordinator v6 with key type SHARE and the share coordinator's inter-broker APIs are for brokers,
so they need CLUSTER_ACTION on the cluster; alice, without it, gets CLUSTER_AUTHORIZATION_FAILED where
the super user admin is answered."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from grete.protocol.errors import ErrorCode
from grete.protocol.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
)

RETRY = {ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}


@pytest.fixture
def share_capable(secure_broker: Any, target: str) -> Any:
    if target.startswith("kafka-3"):
        pytest.skip("Kafka 3.9 has no share coordinator")
    return secure_broker


def test_share_coordinator_apis_need_cluster_action(share_capable: Any) -> None:
    key = f"g-{uuid.uuid4().hex[:8]}:AAAAAAAAAAAAAAAAAAAAAA:0"
    lookup = FindCoordinatorRequest(key_type=2, coordinator_keys=[key])
    admin, alice = share_capable.login("admin"), share_capable.login("alice")
    try:
        deadline = time.monotonic() + 60
        while True:  # the first lookup creates __share_group_state
            found = admin.call(lookup, FindCoordinatorResponse, 6).coordinators[0]
            if found.error_code not in RETRY or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert found.error_code == 0 and found.node_id >= 0
        refused = alice.call(lookup, FindCoordinatorResponse, 6).coordinators[0]
        assert (refused.error_code, refused.node_id) == (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, -1)
        S = ReadShareGroupStateSummaryRequest
        summary = S(group_id="g", topics=[S.ReadStateSummaryData(topic_id=uuid.UUID(int=1), partitions=[
            S.PartitionData(partition=0, leader_epoch=0)])])
        (denied,) = alice.call(summary, ReadShareGroupStateSummaryResponse, 1).results[0].partitions
        assert denied.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    finally:
        admin.close()
        alice.close()
