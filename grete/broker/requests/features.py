"""Feature versioning (KIP-584): the levels a client reads from ApiVersions and UpdateFeatures sets.

The single node answers as Kafka 4.3's KRaft cluster does: it lists the features whose semantics
grete has (``SUPPORTED``), finalizes Kafka 4.3.1's default level for each at its first start, and
lets UpdateFeatures move a level inside the supported range with Kafka's checks and messages. A
level below a feature's threshold switches its APIs off as Kafka's KafkaApis does (``GATES``: the
APIs stay advertised and answer UNSUPPORTED_VERSION). ``metadata.version`` is not offered (UpdateFeatures
cannot move it). ``kraft.version`` is offered by the nodes of a KRaft cluster of several (``KRaftVersion``:
the quorum's own level, in its control records; an upgrade to 1 makes a static quorum dynamic), not by
the single node, whose quorum is itself alone.

A ZooKeeper cluster answers as a Kafka 3.9 ZooKeeper-mode broker: no supported or finalized
features, and UpdateFeatures refuses every feature (so 4.x clients stay on the protocols a 3.9
cluster speaks, and each group protocol runs whatever its own configs say).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from grete.broker.requests import release_versions as rv
from grete.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True)
class FeatureSpec:
    name: str
    max_level: int
    default_level: int  # what Kafka 4.3.1 finalizes on a new cluster
    min_level: int = 0


SUPPORTED = (
    # grete's single node has no replicas to elect among, so ELR's rules hold trivially; its
    # visible part (the cluster-level min.insync.replicas) is written at the first start.
    FeatureSpec("eligible.leader.replicas.version", 1, 1),
    FeatureSpec("group.version", 1, 1),  # 1: the consumer group protocol (KIP-848)
    FeatureSpec("share.version", 1, 1),  # 1: share groups (KIP-932)
    FeatureSpec("streams.version", 1, 1),  # 1: streams groups (KIP-1071)
    # 2: transaction version 2 (KIP-890 part 2): clients bump the epoch at every EndTxn (v5) and
    # leaders add partitions at Produce 12+ / TxnOffsetCommit 5. A level below 2 only stops
    # advertising it: the request versions decide, as in Kafka's coordinator.
    FeatureSpec("transaction.version", 2, 2),
)
_BY_NAME = {spec.name: spec for spec in SUPPORTED}
KRAFT_VERSION = rv.KRAFT_VERSION
KRAFT_SPEC = FeatureSpec(KRAFT_VERSION, 1, 0)  # 0: a static quorum, 1: a dynamic one (KIP-853)
# A KRaft cluster's metadata.version, from the first KRaft can bootstrap to the latest production one.
METADATA_SPEC = FeatureSpec(rv.METADATA_VERSION, rv.LATEST_PRODUCTION.level, rv.LATEST_PRODUCTION.level,
                            rv.METADATA_VERSIONS[0].level)
FAILED = "The update failed for all features since the following feature had an error: "

# API key -> (feature, lowest level that serves it), as Kafka's KafkaApis checks before handling.
GATES: dict[int, tuple[str, int]] = {
    68: ("group.version", 1), 69: ("group.version", 1),  # ConsumerGroupHeartbeat / Describe
    76: ("share.version", 1), 77: ("share.version", 1),  # ShareGroupHeartbeat / Describe
    78: ("share.version", 1), 79: ("share.version", 1),  # ShareFetch / ShareAcknowledge
    90: ("share.version", 1), 91: ("share.version", 1), 92: ("share.version", 1),  # share offsets
    88: ("streams.version", 1), 89: ("streams.version", 1),  # StreamsGroupHeartbeat / Describe
}

UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3
_ZK_REFUSAL = "Could not apply finalized feature update because the provided feature is not supported."


@dataclass(frozen=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int  # UPGRADE, SAFE_DOWNGRADE or UNSAFE_DOWNGRADE (v0's AllowDowngrade mapped)


class FeatureStore(Protocol):
    """Where finalized levels live: the single node's metadata (FeatureLevelRecords in its log)."""

    def finalized_features(self) -> tuple[int, dict[str, int] | None]: ...
    async def set_finalized_features(self, levels: dict[str, int], static_min_isr: int = 1) -> int: ...


class KRaftVersion(Protocol):
    """kraft.version on a node of a KRaft cluster of several, and what the cluster's other nodes
    support (grete/broker/quorum/kraft_version.py)."""

    @property
    def level(self) -> int: ...

    async def upgrade(self, level: int, validate_only: bool) -> None:
        """Raises KafkaError with the code and message UpdateFeatures answers."""

    def unsupported(self, feature: str, level: int) -> str | None:
        """Why a registered broker or controller cannot run ``level`` (None: every one can)."""


class Features:
    """The finalized levels; their owner is the metadata store (the single node's metadata log), None
    in a ZooKeeper cluster; kraft.version's, the quorum's (``kraft``)."""

    def __init__(self, store: FeatureStore | None, node_id: int, kraft: KRaftVersion | None = None,
                 static_min_isr: int = 1) -> None:
        self.store = store
        self.node_id = node_id
        self.kraft = kraft
        self.static_min_isr = static_min_isr  # min.insync.replicas in this node's properties

    def _stored(self) -> dict[str, int]:
        """The store's levels as they stand: a KRaft node's follow its metadata log (another node's
        UpdateFeatures, the format step's bootstrap records), read at each use."""
        if self.store is None:
            return {}
        stored = self.store.finalized_features()[1]
        if stored is None:  # a node that never had an update: Kafka's bootstrap levels
            stored = {spec.name: spec.default_level for spec in SUPPORTED}
        return stored

    @property
    def _levels(self) -> dict[str, int]:
        """The levels of the features below (one this grete does not offer, a newer grete's, is not served)."""
        return {name: level for name, level in self._stored().items() if name in _BY_NAME}

    @property
    def _cluster_specs(self) -> tuple[FeatureSpec, ...]:
        """A KRaft cluster of several also offers its metadata.version and kraft.version."""
        return (METADATA_SPEC, KRAFT_SPEC) if self.kraft is not None else ()

    @property
    def epoch(self) -> int:
        """The metadata offset of the last feature change (KRaft's FinalizedFeaturesEpoch)."""
        return self.store.finalized_features()[0] if self.store is not None else 0

    @property
    def managed(self) -> bool:
        return self.store is not None

    def supported(self) -> list[FeatureSpec]:
        return [*SUPPORTED, *self._cluster_specs] if self.managed else []

    def finalized(self) -> dict[str, int]:
        levels = dict(self._levels)
        for spec in self._cluster_specs:
            levels[spec.name] = self.level(spec.name)
        return {name: level for name, level in sorted(levels.items()) if level > 0}

    def level(self, name: str) -> int:
        if name == KRAFT_VERSION and self.kraft is not None:
            return self.kraft.level
        if name == rv.METADATA_VERSION and self.kraft is not None:
            return self._stored().get(name, 0)
        return self._levels.get(name, 0)

    def refuses(self, api_key: int) -> bool:
        """True when the API's feature is finalized below the level it needs (single node only)."""
        gate = GATES.get(api_key)
        return gate is not None and self.managed and self._levels.get(gate[0], 0) < gate[1]

    # ------------------------------------------------------------------------------ UpdateFeatures
    def zk_refusals(self, updates: list[FeatureUpdate]) -> list[tuple[str, int, str | None]]:
        """A ZooKeeper-mode controller supports no feature: each update gets INVALID_REQUEST."""
        return [(u.feature, ErrorCode.INVALID_REQUEST, _ZK_REFUSAL) for u in updates]

    async def update(self, updates: list[FeatureUpdate], validate_only: bool) -> None:
        """Apply all updates or none; raises KafkaError(INVALID_UPDATE_VERSION) naming the first
        feature that fails Kafka's checks (FeatureControlManager's messages)."""
        levels = dict(self._levels)
        for u in updates:
            problem = self._check(u)
            if problem is not None:
                raise KafkaError(ErrorCode.INVALID_UPDATE_VERSION, FAILED + problem)
            levels[u.feature] = u.level
        # kraft.version is no FeatureLevelRecord: the quorum's leader takes it (Kafka's raft client),
        # after every other check passed.
        levels.pop(KRAFT_VERSION, None)
        kraft = next((u for u in updates if u.feature == KRAFT_VERSION and u.upgrade_type == UPGRADE), None)
        if kraft is not None and self.kraft is not None:
            await self.kraft.upgrade(kraft.level, validate_only)
        if validate_only or not updates:
            return
        assert self.store is not None
        await self.store.set_finalized_features(levels, self.static_min_isr)

    def _check(self, u: FeatureUpdate) -> str | None:
        problem = self._problem(u)
        if problem is not None:
            return f"Invalid update version {u.level} for feature {u.feature}. {problem}"
        current = self.level(u.feature)
        if u.feature == rv.METADATA_VERSION and u.level < current and rv.metadata_changed(current, u.level):
            # As Kafka: a downgrade only between versions whose records mean the same.
            reason = ("Unsafe metadata downgrade is not supported in this version." if u.upgrade_type == UNSAFE_DOWNGRADE
                      else "Refusing to perform the requested downgrade because it might delete metadata information.")
            return f"Unsupported metadata.version downgrade from {current} to {u.level}. {reason}"
        return None

    def _problem(self, u: FeatureUpdate) -> str | None:
        if u.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            return "The controller does not support the given upgrade type."
        if u.level < 0:
            return "A feature version cannot be less than 0."
        spec = next((c for c in self._cluster_specs if c.name == u.feature), None) or _BY_NAME.get(u.feature)
        if spec is None:
            if u.level == 0:
                return f"Feature {u.feature} not found."
            return f"Local controller {self.node_id} does not support this feature."
        if not spec.min_level <= u.level <= spec.max_level:
            return f"Local controller {self.node_id} only supports versions {spec.min_level}-{spec.max_level}"
        elsewhere = self.kraft.unsupported(u.feature, u.level) if self.kraft is not None else None
        if elsewhere is not None:
            return elsewhere
        current = self.level(u.feature)
        if u.level < current and u.upgrade_type == UPGRADE:
            return ("Can't downgrade the version of this feature without setting the upgrade type to "
                    "either safe or unsafe downgrade.")
        if u.level > current and u.upgrade_type != UPGRADE:
            return "Can't downgrade to a newer version."
        if spec is KRAFT_SPEC and u.level != current and u.upgrade_type != UPGRADE:
            return "Can't downgrade the version of this feature."
        return None
