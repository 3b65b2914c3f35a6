"""Feature versioning (KIP-584): the levels in ApiVersions v3+ and UpdateFeatures' checks, the same
raw requests against Kafka 4.3.1 and grete. Every change made here is taken back at the end (the
broker is shared by the session's tests). Levels a group protocol needs: with ``group.version`` 0 a
ConsumerGroupHeartbeat answers UNSUPPORTED_VERSION, with ``share.version`` 0 a ShareGroupHeartbeat."""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from grete.protocol.errors import ErrorCode  # noqa: E402
from grete.protocol.messages import (  # noqa: E402
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
    UpdateFeaturesRequest,
    UpdateFeaturesResponse,
)
from grete.testing._wire import Wire  # noqa: E402

pytestmark = pytest.mark.skipif("config.getoption('--target', default=None) == 'kafka-3.9'",
                                reason="Kafka 4.3's KRaft features (a 3.9 KRaft node finalizes others)")
UPGRADE, SAFE, UNSAFE = 1, 2, 3
GRETE_FEATURES = ("eligible.leader.replicas.version", "group.version", "share.version", "streams.version")
PREFIX = "The update failed for all features since the following feature had an error: "


def versions(wire: Wire) -> ApiVersionsResponse:
    return wire.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"), ApiVersionsResponse, 4)


def finalized(wire: Wire) -> dict[str, int]:
    return {f.name: f.max_version_level for f in versions(wire).finalized_features}


def update(wire: Wire, feature: str, level: int, kind: int = UPGRADE, *, version: int = 1,
           validate_only: bool = False) -> UpdateFeaturesResponse:
    key = UpdateFeaturesRequest.FeatureUpdateKey(feature=feature, max_version_level=level,
                                                 upgrade_type=kind if version >= 1 else UPGRADE,
                                                 allow_downgrade=version == 0 and kind != UPGRADE)
    return wire.call(UpdateFeaturesRequest(timeout_ms=10000, feature_updates=[key], validate_only=validate_only),
                     UpdateFeaturesResponse, version)


def refused(response: UpdateFeaturesResponse, feature: str, level: int, reason: str) -> bool:
    return (response.error_code == ErrorCode.INVALID_UPDATE_VERSION and not response.results
            and re.fullmatch(re.escape(f"{PREFIX}Invalid update version {level} for feature {feature}. ") + reason,
                             response.error_message or "") is not None)


def ok(response: UpdateFeaturesResponse, feature: str) -> bool:
    return (response.error_code == 0 and response.error_message is None
            and [(r.feature, r.error_code, r.error_message) for r in response.results] == [(feature, 0, "NONE")])


def heartbeat_error(wire: Wire, kind: str) -> int:
    member = str(uuid.uuid4())
    if kind == "streams":
        q = StreamsGroupHeartbeatRequest
        topology = q.Topology(epoch=0, subtopologies=[q.Subtopology(
            subtopology_id="0", source_topics=["features-t"], source_topic_regex=[], state_changelog_topics=[],
            repartition_sink_topics=[], repartition_source_topics=[], copartition_groups=[])])
        return wire.call(q(group_id="features-st", member_id=member, member_epoch=0, endpoint_information_epoch=0,
                           rebalance_timeout_ms=30000, topology=topology, active_tasks=[], standby_tasks=[],
                           warmup_tasks=[], process_id="p1"), StreamsGroupHeartbeatResponse, 0).error_code
    if kind == "share":
        return wire.call(ShareGroupHeartbeatRequest(group_id="features-s", member_id=member, member_epoch=0,
                                                    subscribed_topic_names=["features-t"]),
                         ShareGroupHeartbeatResponse, 1).error_code
    return wire.call(ConsumerGroupHeartbeatRequest(group_id="features-c", member_id=member, member_epoch=0,
                                                   rebalance_timeout_ms=30000, subscribed_topic_names=["features-t"],
                                                   topic_partitions=[]),
                     ConsumerGroupHeartbeatResponse, 1).error_code


def test_levels_in_api_versions(wire):
    answer = versions(wire)
    supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
    levels = finalized(wire)
    for name in GRETE_FEATURES:
        assert supported[name] == (0, 1) and levels[name] == 1, name
    assert answer.finalized_features_epoch >= 0


def test_update_checks(wire):
    assert refused(update(wire, "no.such.version", 1), "no.such.version", 1,
                   r"Local controller \d+ does not support this feature\.")
    assert refused(update(wire, "no.such.version", 0, UNSAFE), "no.such.version", 0,
                   re.escape("Feature no.such.version not found."))
    assert refused(update(wire, "group.version", 2), "group.version", 2,
                   r"Local controller \d+ only supports versions 0-1")
    assert refused(update(wire, "group.version", -1, UNSAFE), "group.version", -1,
                   re.escape("A feature version cannot be less than 0."))
    assert refused(update(wire, "group.version", 1, 7), "group.version", 1,
                   re.escape("The controller does not support the given upgrade type."))
    assert refused(update(wire, "group.version", 0), "group.version", 0,
                   re.escape("Can't downgrade the version of this feature without setting the upgrade type to "
                             "either safe or unsafe downgrade."))
    assert ok(update(wire, "group.version", 1), "group.version")  # the level it has: no change
    assert ok(update(wire, "group.version", 0, SAFE, validate_only=True), "group.version")
    assert finalized(wire)["group.version"] == 1  # only validated


@pytest.mark.parametrize("feature,kind", [("group.version", "consumer"), ("share.version", "share"),
                                          ("streams.version", "streams")])
def test_a_feature_off_switches_its_protocol_off(wire, feature, kind):
    epoch = versions(wire).finalized_features_epoch
    try:
        assert ok(update(wire, feature, 0, SAFE), feature)
        assert feature not in finalized(wire) and versions(wire).finalized_features_epoch > epoch
        assert heartbeat_error(wire, kind) == ErrorCode.UNSUPPORTED_VERSION
        assert refused(update(wire, feature, 1, UNSAFE), feature, 1, re.escape("Can't downgrade to a newer version."))
    finally:
        restored = update(wire, feature, 1)
    assert ok(restored, feature) and finalized(wire)[feature] == 1
    assert heartbeat_error(wire, kind) != ErrorCode.UNSUPPORTED_VERSION


def test_version_0_and_2_forms(wire):
    # Kafka 4.3's controller reads only the upgrade type, which v0 lacks: AllowDowngrade is ignored.
    assert refused(update(wire, "share.version", 0, SAFE, version=0), "share.version", 0,
                   re.escape("Can't downgrade the version of this feature without setting the upgrade type to "
                             "either safe or unsafe downgrade."))
    try:
        assert update(wire, "share.version", 0, UNSAFE, version=2).results == []
        assert "share.version" not in finalized(wire)
    finally:
        restored = update(wire, "share.version", 1, version=2)
    assert restored.error_code == 0 and restored.results == []  # v2 has no per-feature results
    assert finalized(wire)["share.version"] == 1
