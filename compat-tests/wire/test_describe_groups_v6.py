"""DescribeGroups v6 (KIP-1043): a group that does not exist is GROUP_ID_NOT_FOUND with Kafka's
message; v5 and older still answer it as a Dead group without an error."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import DescribeGroupsRequest, FindCoordinatorRequest  # noqa: E402
from tools.kafka_admin import call  # noqa: E402

COORDINATOR_NOT_READY = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                         ErrorCode.COORDINATOR_NOT_AVAILABLE)


def test_unknown_group_by_version(broker):
    group = f"nobody-{uuid.uuid4().hex[:8]}"
    # Kafka answers NOT_COORDINATOR until FindCoordinator has made __consumer_offsets.
    call(broker.bootstrap, FindCoordinatorRequest(key=group, key_type=0), 3)
    request = DescribeGroupsRequest(groups=[group], include_authorized_operations=False)
    deadline = time.monotonic() + 30
    while (old := call(broker.bootstrap, request, 5).groups[0]).error_code in COORDINATOR_NOT_READY:
        assert time.monotonic() < deadline, "no group coordinator"
        time.sleep(0.2)
    assert (old.error_code, old.group_state, old.members) == (0, "Dead", [])
    new = call(broker.bootstrap, request, 6).groups[0]
    assert new.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert new.error_message == f"Group {group} not found."
    assert new.group_state == "Dead"
