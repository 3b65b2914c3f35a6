"""kraft.version as UpdateFeatures and ApiVersions see it on a node of a KRaft cluster of several.

Unlike the other features it is not a FeatureLevelRecord: it lives in the quorum's own control records
(KRaftVersionRecord), so its level is the Raft log's. On the active controller an upgrade goes to the
core (raft_reconfig's ``upgrade_kraft_version``: a static quorum becomes a dynamic one once every voter
told the leader its endpoints), then a NoOpRecord is committed and the answer given, as Kafka 4.3.1's
FeatureControlManager does. A broker forwards the upgrade to the active controller. The controller also
checks every feature update against the cluster's registrations (``unsupported``), as Kafka's does.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from grete.broker.quorum.broker_store import BrokerMetadataStore
from grete.broker.quorum.brokers import Registrations
from grete.broker.quorum.driver import RaftDriver
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import NoOpRecord

log = logging.getLogger(__name__)

MAX_LEVEL = 32767  # Short.MAX_VALUE: a range open upwards
FAILED = "The update failed for all features since the following feature had an error: "


class ControllerKRaftVersion:
    def __init__(self, driver: Callable[[], RaftDriver], commit: Callable[[Sequence[Message]], Awaitable[None]],
                 registrations: Callable[[], Registrations]) -> None:
        self._driver = driver
        self._commit = commit
        self._registrations = registrations

    def unsupported(self, feature: str, level: int) -> str | None:
        """Kafka's FeatureControlManager.reasonNotSupported past this controller: every registered
        broker, then every registered controller, must support ``level``, and every voter must have
        registered (a feature a node does not list is supported at 0 only)."""
        found = self._registrations()
        for broker_id, broker in sorted(found.brokers.items()):
            ranges = {f.name: (f.min_supported_version, f.max_supported_version) for f in broker.features}
            if (reason := _reason(f"Broker {broker_id}", ranges.get(feature), level)) is not None:
                return reason
        for controller_id, controller in sorted(found.controllers.items()):
            ranges = {f.name: (f.min_supported_version, f.max_supported_version) for f in controller.features}
            if (reason := _reason(f"Controller {controller_id}", ranges.get(feature), level)) is not None:
                return reason
        missing = sorted(set(self._driver().raft.voters) - set(found.controllers))
        if missing:
            return f"controller {missing[0]} has not registered, and may not support this feature"
        return None

    @property
    def level(self) -> int:
        return self._driver().raft.history.kraft_version

    async def upgrade(self, level: int, validate_only: bool) -> None:
        driver = self._driver()
        try:
            await driver.change_voters(lambda now: driver.raft.upgrade_kraft_version(level, validate_only, now))
        except KafkaError as exc:
            if exc.code == ErrorCode.INVALID_UPDATE_VERSION:
                raise KafkaError(exc.code, FAILED + (exc.message or "")) from None
            raise
        if not validate_only:
            await self._commit([NoOpRecord()])
            log.info("metadata quorum: kraft.version %d: the voter set is in the log now", level)


def _reason(node: str, supported: tuple[int, int] | None, level: int) -> str | None:
    if supported is None:
        return None if level == 0 else f"{node} does not support this feature."
    low, high = supported
    if low <= level <= high:
        return None
    shown = str(low) if low == high else f"{low}+" if high == MAX_LEVEL else f"{low}-{high}"  # Kafka's VersionRange
    return f"{node} only supports versions {shown}"


class BrokerKRaftVersion:
    def __init__(self, driver: RaftDriver, store: BrokerMetadataStore) -> None:
        self._driver = driver
        self._store = store

    @property
    def level(self) -> int:
        return self._driver.raft.history.kraft_version

    async def upgrade(self, level: int, validate_only: bool) -> None:
        """Never reached: the broker forwards UpdateFeatures to the active controller."""
        raise KafkaError(ErrorCode.NOT_CONTROLLER, "UpdateFeatures is carried out by the controller")

    def unsupported(self, feature: str, level: int) -> str | None:
        return None  # the controller checks the cluster's nodes when the update reaches it
