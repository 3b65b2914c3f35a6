"""kraft.version as UpdateFeatures and ApiVersions see it on a node of a KRaft cluster of several.

Unlike the other features it is not a FeatureLevelRecord: it lives in the quorum's own control records
(KRaftVersionRecord), so its level is the Raft log's. On the active controller an upgrade goes to the
core (raft_reconfig's ``upgrade_kraft_version``: a static quorum becomes a dynamic one once every voter
told the leader its endpoints), then a NoOpRecord is committed and the answer given, as Kafka 4.3.1's
FeatureControlManager does. A broker forwards the upgrade to the active controller.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from grete.broker.quorum.broker_store import BrokerMetadataStore
from grete.broker.quorum.driver import RaftDriver
from grete.protocol.codec import Message
from grete.protocol.errors import ErrorCode, KafkaError
from grete.protocol.metadata import NoOpRecord

log = logging.getLogger(__name__)

FAILED = "The update failed for all features since the following feature had an error: "


class ControllerKRaftVersion:
    def __init__(self, driver: Callable[[], RaftDriver], commit: Callable[[Sequence[Message]], Awaitable[None]]) -> None:
        self._driver = driver
        self._commit = commit

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


class BrokerKRaftVersion:
    def __init__(self, driver: RaftDriver, store: BrokerMetadataStore) -> None:
        self._driver = driver
        self._store = store

    @property
    def level(self) -> int:
        return self._driver.raft.history.kraft_version

    async def upgrade(self, level: int, validate_only: bool) -> None:
        await self._store.upgrade_kraft_version(level, validate_only)
