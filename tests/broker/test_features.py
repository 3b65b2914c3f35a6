"""The single node's finalized feature levels: Kafka 4.3.1's defaults at the first start, all-or-
nothing updates, and the levels kept in the metadata file across a restart. (The wire answers are
compared with Kafka 4.3.1 in compat-tests/wire/test_wire_features.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from grete.broker.requests.features import (
    FAILED,
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    Features,
    FeatureUpdate,
)
from grete.coordinator.kraft.local import open_local_store
from grete.protocol.errors import ErrorCode, KafkaError


def test_defaults_then_updates_survive_a_restart(tmp_path: Path) -> None:
    features = Features(open_local_store(tmp_path, 1), node_id=1)
    assert features.finalized() == {"eligible.leader.replicas.version": 1, "group.version": 1, "share.version": 1,
                                    "streams.version": 1, "transaction.version": 2}
    assert not features.refuses(68) and not features.refuses(0)
    asyncio.run(features.update([FeatureUpdate("group.version", 0, SAFE_DOWNGRADE)], validate_only=False))
    assert features.refuses(68) and features.refuses(69) and not features.refuses(76)
    again = Features(open_local_store(tmp_path, 1), node_id=1)  # a restart replays the metadata log
    # As in KRaft, the epoch is the metadata log offset of the change.
    assert "group.version" not in again.finalized() and again.epoch == features.epoch > 0
    assert again.refuses(68)


def test_an_update_with_one_bad_feature_changes_nothing(tmp_path: Path) -> None:
    features = Features(open_local_store(tmp_path, 1), node_id=1)
    updates = [FeatureUpdate("share.version", 0, SAFE_DOWNGRADE), FeatureUpdate("group.version", 5, UPGRADE)]
    with pytest.raises(KafkaError) as refused:
        asyncio.run(features.update(updates, validate_only=False))
    assert refused.value.code == ErrorCode.INVALID_UPDATE_VERSION
    assert "only supports versions 0-1" in (refused.value.message or "")
    assert features.level("share.version") == 1 and features.epoch == 0


def test_a_zookeeper_cluster_has_no_features() -> None:
    features = Features(None, node_id=2)
    assert features.supported() == [] and features.finalized() == {}
    assert not features.refuses(68)  # the group protocols follow their own configs there


def test_an_update_leaves_the_levels_it_does_not_name(tmp_path: Path) -> None:
    """A KRaft quorum's metadata.version is finalized beside the features UpdateFeatures moves here:
    an update of one of those writes nothing for it."""
    store = open_local_store(tmp_path, 1)
    asyncio.run(store.set_finalized_features({"metadata.version": 27}))
    features = Features(store, node_id=1)
    asyncio.run(features.update([FeatureUpdate("group.version", 0, SAFE_DOWNGRADE)], validate_only=False))
    levels = store.finalized_features()[1]
    assert levels is not None and levels["metadata.version"] == 27 and "group.version" not in levels


class QuorumLevel:
    """kraft.version as a quorum holds it (the real one: grete/broker/quorum/kraft_version.py)."""

    def __init__(self) -> None:
        self.level = 0
        self.asked: list[tuple[int, bool]] = []
        self.lacking: dict[str, str] = {}  # feature -> why a registered node cannot run it

    def unsupported(self, feature: str, level: int) -> str | None:
        return self.lacking.get(feature)

    async def upgrade(self, level: int, validate_only: bool) -> None:
        self.asked.append((level, validate_only))
        if not validate_only:
            self.level = level


def test_kraft_version_is_the_quorums_and_only_upgrades(tmp_path: Path) -> None:
    kraft = QuorumLevel()
    features = Features(open_local_store(tmp_path, 1), node_id=1, kraft=kraft)
    assert ("kraft.version", 0, 1) in [(f.name, f.min_level, f.max_level) for f in features.supported()]
    assert "kraft.version" not in features.finalized()  # level 0 is not listed, as Kafka's
    asyncio.run(features.update([FeatureUpdate("kraft.version", 1, UPGRADE)], validate_only=True))
    asyncio.run(features.update([FeatureUpdate("kraft.version", 1, UPGRADE)], validate_only=False))
    assert kraft.asked == [(1, True), (1, False)] and features.finalized()["kraft.version"] == 1
    for upgrade_type, message in ((UPGRADE, "without setting the upgrade type"),
                                  (SAFE_DOWNGRADE, "Can't downgrade the version of this feature.")):
        with pytest.raises(KafkaError) as refused:
            asyncio.run(features.update([FeatureUpdate("kraft.version", 0, upgrade_type)], validate_only=False))
        assert refused.value.code == ErrorCode.INVALID_UPDATE_VERSION and message in (refused.value.message or "")
    with pytest.raises(KafkaError) as beyond:
        asyncio.run(features.update([FeatureUpdate("kraft.version", 2, UPGRADE)], validate_only=False))
    assert "Local controller 1 only supports versions 0-1" in (beyond.value.message or "")
    assert kraft.asked == [(1, True), (1, False)]


def test_a_level_a_registered_node_cannot_run_is_refused(tmp_path: Path) -> None:
    kraft = QuorumLevel()
    features = Features(open_local_store(tmp_path, 1), node_id=1, kraft=kraft)
    kraft.lacking["streams.version"] = "Broker 7 does not support this feature."
    with pytest.raises(KafkaError) as refused:
        asyncio.run(features.update([FeatureUpdate("streams.version", 0, SAFE_DOWNGRADE),
                                     FeatureUpdate("streams.version", 1, UPGRADE)], validate_only=False))
    assert refused.value.message == ("The update failed for all features since the following feature had an error: "
                                     "Invalid update version 0 for feature streams.version. Broker 7 does not "
                                     "support this feature.")


def test_metadata_version_downgrades_only_where_no_record_changed(tmp_path: Path) -> None:
    """As Kafka's FeatureControlManager: 4.2-IV1 (29) down to 4.0-IV2 (24) crosses no version that
    changed the records; 4.3-IV0 (30) and 4.0-IV1 (23) did, so a downgrade across them is refused."""
    store = open_local_store(tmp_path, 1)
    asyncio.run(store.set_finalized_features({"metadata.version": 30}))
    features = Features(store, node_id=1, kraft=QuorumLevel())

    def downgrade(level: int, upgrade_type: int = SAFE_DOWNGRADE) -> str | None:
        try:
            asyncio.run(features.update([FeatureUpdate("metadata.version", level, upgrade_type)], validate_only=False))
        except KafkaError as refused:
            assert refused.code == ErrorCode.INVALID_UPDATE_VERSION
            return refused.message
        return None

    assert downgrade(29) == (FAILED + "Unsupported metadata.version downgrade from 30 to 29. Refusing to perform "
                             "the requested downgrade because it might delete metadata information.")
    asyncio.run(store.set_finalized_features({"metadata.version": 29}))
    assert downgrade(24) is None and store.finalized_features()[1]["metadata.version"] == 24  # type: ignore[index]
    assert downgrade(22, UNSAFE_DOWNGRADE) == (FAILED + "Unsupported metadata.version downgrade from 24 to 22. "
                                               "Unsafe metadata downgrade is not supported in this version.")
    assert store.finalized_features()[1]["metadata.version"] == 24  # type: ignore[index]


def test_eligible_leader_replicas_turned_on_bring_the_cluster_min_isr(tmp_path: Path) -> None:
    """As Kafka's controller (its ELR safety records, in the feature's batch): the cluster-level
    min.insync.replicas from this node's static config unless one is set, and no broker's own."""
    store = open_local_store(tmp_path, 1)
    features = Features(store, node_id=1, static_min_isr=2)
    elr = "eligible.leader.replicas.version"
    asyncio.run(features.update([FeatureUpdate(elr, 0, SAFE_DOWNGRADE)], validate_only=False))
    asyncio.run(store.set_broker_configs("3", {"min.insync.replicas": "3", "log.cleaner.threads": "2"}))
    assert "min.insync.replicas" not in store.broker_configs("")
    asyncio.run(features.update([FeatureUpdate(elr, 1, UPGRADE)], validate_only=False))
    assert store.broker_configs("") == {"min.insync.replicas": "2"}
    assert store.broker_configs("3") == {"log.cleaner.threads": "2"}
    asyncio.run(store.set_broker_configs("", {"min.insync.replicas": "1"}))
    asyncio.run(features.update([FeatureUpdate(elr, 1, UPGRADE)], validate_only=False))
    assert store.broker_configs("") == {"min.insync.replicas": "1"}  # one already set stays
