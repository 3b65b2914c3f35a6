"""Kafka 4.3.1's metadata versions (MetadataVersion) and the KRaft features' levels per version
(Feature, FeatureVersion): what ``kafka-storage format --release-version`` and ``--feature`` accept
and the levels a new cluster starts with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

METADATA_VERSION: Final = "metadata.version"
KRAFT_VERSION: Final = "kraft.version"


@dataclass(frozen=True, slots=True)
class MetadataVersion:
    name: str  # "4.3-IV0"
    level: int  # the metadata.version feature level
    production: bool = True

    @property
    def short(self) -> str:
        return self.name.split("-", 1)[0]

    def __str__(self) -> str:
        return self.name


# MetadataVersion.values() from MINIMUM_VERSION (3.3-IV3, the first KRaft can bootstrap) on; the
# levels whose records changed (didMetadataChange) are the ones a downgrade may not cross.
_CHANGED_METADATA: Final = frozenset({7, 8, 11, 13, 14, 15, 17, 23, 30})
METADATA_VERSIONS: Final = tuple(MetadataVersion(name, level, level <= 30) for name, level in (
    ("3.3-IV3", 7), ("3.4-IV0", 8), ("3.5-IV0", 9), ("3.5-IV1", 10), ("3.5-IV2", 11), ("3.6-IV0", 12),
    ("3.6-IV1", 13), ("3.6-IV2", 14), ("3.7-IV0", 15), ("3.7-IV1", 16), ("3.7-IV2", 17), ("3.7-IV3", 18),
    ("3.7-IV4", 19), ("3.8-IV0", 20), ("3.9-IV0", 21), ("4.0-IV0", 22), ("4.0-IV1", 23), ("4.0-IV2", 24),
    ("4.0-IV3", 25), ("4.1-IV0", 26), ("4.1-IV1", 27), ("4.2-IV0", 28), ("4.2-IV1", 29), ("4.3-IV0", 30),
    ("4.4-IV0", 31),
))


def metadata_changed(level: int, other: int) -> bool:
    """Whether records written at one of the two levels may mean something else at the other
    (MetadataVersion.checkIfMetadataChanged): a version between them, the lower excluded, changed them."""
    low, high = sorted((level, other))
    return any(v in _CHANGED_METADATA for v in range(low + 1, high + 1))


LATEST_PRODUCTION: Final = next(v for v in reversed(METADATA_VERSIONS) if v.production)
SCRAM_FROM_LEVEL: Final = 11  # 3.5-IV2: UserScramCredentialRecord in the metadata log

# Feature.PRODUCTION_FEATURES: per level, the metadata.version level from which it is the default
# (FeatureVersion.bootstrapMetadataVersion) and what it depends on.
FEATURE_LEVELS: Final[dict[str, dict[int, int]]] = {
    KRAFT_VERSION: {0: 7, 1: 21},
    "transaction.version": {0: 7, 1: 24, 2: 24},
    "group.version": {0: 7, 1: 22},
    "eligible.leader.replicas.version": {0: 7, 1: 26},
    "share.version": {0: 7, 1: 28},
    "streams.version": {0: 7, 1: 29},
}
FEATURE_DEPENDENCIES: Final[dict[tuple[str, int], dict[str, int]]] = {
    ("eligible.leader.replicas.version", 1): {METADATA_VERSION: 23},
}


def unknown_release_version(text: str) -> str:
    supported = ", ".join(v.name for v in METADATA_VERSIONS if v.production)
    return f"Unknown metadata.version '{text}'. Supported metadata.version are: {supported}"


def from_version_string(text: str) -> MetadataVersion:
    """MetadataVersion.fromVersionString for production versions: ``4.0-IV3``, or ``4.0`` for the
    release's last version. ValueError with Kafka's message otherwise."""
    known = [v for v in METADATA_VERSIONS if v.production]
    for version in reversed(known):
        if text in (version.name, version.short):
            return version
    raise ValueError(unknown_release_version(text))


def from_feature_level(level: int) -> MetadataVersion:
    for version in METADATA_VERSIONS:
        if version.level == level:
            return version
    raise ValueError(f"No MetadataVersion with feature level {level}. Valid feature levels are from "
                     f"{METADATA_VERSIONS[0].level} to {METADATA_VERSIONS[-1].level}.")


def default_level(feature: str, version: MetadataVersion) -> int:
    """Feature.defaultLevel: the highest level whose bootstrap metadata version is at most ``version``."""
    return max(level for level, since in FEATURE_LEVELS[feature].items() if since <= version.level)


def check_level(feature: str, level: int, levels: dict[str, int]) -> None:
    """Feature.fromFeatureLevel and Features.validateVersion; ValueError with Kafka's message."""
    if level not in FEATURE_LEVELS[feature]:
        raise ValueError(f"No feature:{feature} with feature level {level}")
    for dependency, needed in FEATURE_DEPENDENCIES.get((feature, level), {}).items():
        if levels.get(dependency, 0) < needed:
            raise ValueError(f"{feature} could not be set to {level} because it depends on "
                             f"{dependency} level {needed}")
